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
# The scope every post needs (delivery_health.py checks the token has it): a call refused
# for another one failed for that part of the alert only (a CSV without files:write), which
# the path check warns of; retried, it would fail again, and held, its thread would wait.
POSTING = "chat:write"
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
        needed = rest.removeprefix(f"({NEEDED}").removesuffix(")").split(",")
        if not any(scope.strip().startswith(POSTING) for scope in needed):
            return None
    if code in TOKEN_ERRORS or "cannot call Slack: " in error:
        return "token"
    if code in CHANNEL_ERRORS or _CHANNEL_GONE.search(error):
        return "channel"
    return None
