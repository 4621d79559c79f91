"""The one rule for a link taken from an invariant's header (its `runbook:`), used by lint,
by Slack's messages and by the status page alike, so a URL lint accepts is never one a page
or a message then hides.

An http(s) URL with no whitespace or control character, and none of `<`, `>` and `|`: those
three delimit a link in Slack's markup (`<url|text>`), where no escape exists for them.
Quotes and other characters are allowed: the page escapes attribute values (autoescape) and
a URL with `'` in it is an ordinary URL."""

from __future__ import annotations

import re

_HTTP_URL = re.compile(r"https?://[^\s<>|\x00-\x1f\x7f]+", re.IGNORECASE)


def link_problem(value: str) -> str | None:
    """Why `value` cannot be a link, or None when it can."""
    if _HTTP_URL.fullmatch(value):
        return None
    if not re.match(r"https?://", value, re.IGNORECASE):
        return "must be an http(s) URL"
    # Slack's link markup (<url|text>) has no escape for these three.
    return "must be a URL without spaces, control characters, '<', '>' or '|'"


def safe_link(url: str | None) -> str | None:
    """`url` when it may be shown as a link (never `javascript:`), else None."""
    return url if url and link_problem(url) is None else None
