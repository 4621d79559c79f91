"""YAML written by people and pull requests (invariant headers, fixtures, the config),
read with bounds: a size limit, no anchors or aliases (a 536-byte header of nested aliases
expands to gigabytes), a nesting limit, no key written twice, and every failure a
`YamlProblem` with its line, never a traceback."""

from __future__ import annotations

import re
from typing import Any

import yaml

try:  # libyaml, in PyYAML's wheels: reads a header about ten times faster than pure Python
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # a PyYAML built without libyaml
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]

MAX_DEPTH = 32


class YamlProblem(Exception):
    def __init__(self, line: int, message: str) -> None:
        self.line = line  # 1-based, in the text given
        self.message = message
        super().__init__(f"line {line}: {message}")


class StrictLoader(_SafeLoader):
    """Safe YAML that refuses a key written twice: the second would silently win."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key (a list): not a mapping key we can use
                raise YamlProblem(
                    key_node.start_mark.line + 1, "a key must be a plain value"
                ) from None
            if duplicate:
                raise YamlProblem(key_node.start_mark.line + 1, f"{key!r} appears twice")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# An anchor or alias is `&` or `*` right before its name; `* * *` in a cron line is neither.
_MAY_ANCHOR = re.compile(r"[&*][^\s,\[\]{}]")


def _plainly_shallow(text: str) -> bool:
    """True when the text can hold no anchor, no alias and no nesting past MAX_DEPTH: each
    level of nesting opens with one of `: ? - [ {`, so fewer of those than the limit bound
    the depth. Most headers pass, and skip the walk over their events."""
    openers = sum(text.count(c) for c in ":?-[{")
    return openers < MAX_DEPTH and _MAY_ANCHOR.search(text) is None


def check_shape(text: str) -> None:
    """Refuse anchors, aliases and deep nesting before anything is built: walking the
    parser's events costs memory for one event at a time."""
    if _plainly_shallow(text):
        return
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_SafeLoader):
            line = event.start_mark.line + 1 if event.start_mark else 1
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise YamlProblem(line, "anchors and aliases (&name, *name) are not allowed here")
            if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise YamlProblem(line, f"nested more than {MAX_DEPTH} levels deep")
            elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as exc:
        raise _problem(exc, text) from None
    except yaml.YAMLError as exc:
        raise YamlProblem(1, f"not valid YAML ({exc})") from None


def load(text: str, max_bytes: int, loader: type[StrictLoader] = StrictLoader) -> Any:
    """The document in `text`, or YamlProblem."""
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise YamlProblem(1, f"is {size:,} bytes; the limit is {max_bytes:,}")
    check_shape(text)
    try:
        return yaml.load(text, Loader=loader)  # a SafeLoader subclass
    except YamlProblem:
        raise
    except yaml.MarkedYAMLError as exc:
        raise _problem(exc, text) from None
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
        # e.g. an integer of 100,000 digits: Python refuses to build it.
        raise YamlProblem(1, f"cannot be read: {type(exc).__name__}: {str(exc)[:120]}") from None


HINTS = {
    # The most common slip: a value with ": " in it (a description, a runbook title).
    "mapping values are not allowed": 'a value that contains ": " must be quoted, '
    'e.g. description: "Every order: exactly one payment"',
    "found character '@' that cannot start any": "a value starting with @ "
    'must be quoted, e.g. owner: "@payments-oncall"',
    "found character '`' that cannot start any": "a value starting with ` must be quoted",
    "could not find expected ':'": "an ordinary comment right under the header needs a "
    "blank line before it (the header is the first block of `-- key: value` lines)",
}


def _problem(exc: yaml.MarkedYAMLError, text: str) -> YamlProblem:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark else 1
    reason = exc.problem or exc.context or "unreadable"
    if reason == "found character that cannot start any token" and exc.problem_mark:
        # libyaml leaves the character out of its message; it is the one at the mark.
        lines = text.splitlines()
        at = exc.problem_mark
        if at.line < len(lines) and at.column < len(lines[at.line]):
            reason = f"found character {lines[at.line][at.column]!r} that cannot start any token"
    hint = next((h for known, h in HINTS.items() if known in reason), None)
    return YamlProblem(line, f"not valid YAML ({reason})" + (f"; {hint}" if hint else ""))
