"""Which of Slack's final refusals a person can fix outside invmon: the token or the app
(every channel), or one channel (created, unarchived, the bot invited). A delivery that
failed with one of them is tried again once the path checks out (delivery_health.py), and
holds the later messages of its thread meanwhile (ledger.py), so a thread never reads out
of order. The others (a message Slack will never take) would only fail again. Pure.
"""

from __future__ import annotations

import re
from typing import Literal

TOKEN_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "missing_scope",
        "no_permission",
        "restricted_action",
    }
)
CHANNEL_ERRORS = frozenset({"channel_not_found", "not_in_channel", "is_archived"})
# How slack.py says which scopes a missing_scope call needed: `missing_scope (needed: a,b)`.
NEEDED = "needed: "
# Scopes that only a part of an alert needs: the CSV (files:write; files:read to tell
# whether one in doubt was shared) and the user groups of ack_allowlist. A call refused for
# lack of them fails that delivery alone: retried by the path's checks, it would only fail
# again, and held, the rest of its thread would wait for it for ever. Any other scope is
# the path's: chat:write for every post; channels:read or groups:read to find a channel
# given by name; *:history to find a post in doubt, which may be a thread's root, whose
# failure fails its whole thread (so it waits for the scope rather than failing for good).
PART_SCOPES = frozenset({"files:write", "files:read", "usergroups:read"})
# How slack.py says a channel cannot take messages when it looks the channel up itself.
_CHANNEL_GONE = re.compile(r"channel '[^']*' (not found or not visible|is archived)$")
_REFUSED = "Slack refused the call: "


def fixed_by_the_path(error: str) -> Literal["token", "channel"] | None:
    """Whether a delivery that failed for good with `error` (a ledger row's last_error, with
    what a thread's other rows say of it: "its root message failed: …") failed for the
    token ("token") or its channel ("channel"), rather than for what it carried (None)."""
    said = error.rsplit(_REFUSED, 1)[-1] if _REFUSED in error else ""
    code, _, rest = said.partition(" ")
    if code == "missing_scope" and rest.startswith(f"({NEEDED}"):
        needed = {n.strip() for n in rest.removeprefix(f"({NEEDED}").removesuffix(")").split(",")}
        if needed <= PART_SCOPES:
            return None
    if code in TOKEN_ERRORS or "cannot call Slack: " in error:
        return "token"
    if code in CHANNEL_ERRORS or _CHANNEL_GONE.search(error):
        return "channel"
    return None


def missing_scope(error: str) -> bool:
    """Whether Slack refused the call for lack of a scope."""
    return error.rsplit(_REFUSED, 1)[-1].startswith("missing_scope") if _REFUSED in error else False
