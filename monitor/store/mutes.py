"""Mutes: planned silences of notifications, as Alertmanager's silences are, kept in the
state store so that every daemon of a fleet honours them. Pure: the record, what a mute
covers, and which requests are refused.

A mute covers invariants by name (a name, a `folder/`, a glob such as `orders/*_twice`;
none: every invariant) and by target (none: every target). While one covers an incident,
its runs and its incident are recorded and shown as ever; only what would notify waits: a
root, its CSV, a thread reply, a reminder. Silent edits of a root already posted go on, so
a message never shows a state the database no longer holds. When the mute ends, what it
held that is still open posts once (alerts/muting.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from monitor.invariants.selection import named_by
from monitor.text import printable

MAX_SELECTOR = 200
MAX_REASON = 500
LONGEST = timedelta(days=90)  # a longer one is an unwatched invariant, not maintenance

MuteState = Literal["scheduled", "active", "ended"]


class MuteRefused(ValueError):
    """A mute that cannot be set, saying why in one sentence."""


@dataclass(frozen=True)
class Mute:
    id: int
    selector: str | None  # invariant names; None: every invariant
    target: str | None  # None: every target
    starts_at: datetime
    ends_at: datetime  # as set; `ends` says when it really ends
    reason: str
    created_by: str
    created_at: datetime
    ended_early_at: datetime | None = None  # `invmon unmute`
    released_at: datetime | None = None  # what it held was planned, once, by one daemon

    @property
    def ends(self) -> datetime:
        early = self.ended_early_at
        return self.ends_at if early is None or early > self.ends_at else early

    def state(self, now: datetime) -> MuteState:
        if now >= self.ends:
            return "ended"
        return "active" if now >= self.starts_at else "scheduled"

    def covers(self, invariant: str, target: str) -> bool:
        """Whether this mute (when active) silences `invariant` on `target`."""
        if self.target is not None and self.target != target:
            return False
        return self.selector is None or name_covered(self.selector, invariant)

    @property
    def what(self) -> str:
        """What it covers, in words: `orders/paid_twice on shop`, `every invariant`."""
        names = self.selector or "every invariant"
        return names if self.target is None else f"{names} on target {self.target}"


def name_covered(selector: str, name: str) -> bool:
    if selector.endswith("/"):
        return name.startswith(selector)
    return named_by(name, selector)


def muting(mutes: Iterable[Mute], invariant: str, target: str, now: datetime) -> Mute | None:
    """The active mute (the one that ends last) covering `invariant` on `target` at `now`."""
    found = [m for m in mutes if m.state(now) == "active" and m.covers(invariant, target)]
    return max(found, key=lambda m: (m.ends, m.id)) if found else None


def checked(
    selector: str | None,
    target: str | None,
    starts: datetime,
    ends: datetime,
    reason: str,
    everything: bool,
    now: datetime,
) -> tuple[str | None, str]:
    """The selector and reason as stored, or MuteRefused naming the flag to change."""
    names = None if selector in (None, "", "*") else selector
    if names is not None and (
        len(names) > MAX_SELECTOR or printable(names) != names or names.startswith("tag:")
    ):
        raise MuteRefused(
            "a mute selects invariants by name, folder/ or glob (printable, at most "
            f"{MAX_SELECTOR} characters); tags are not stored with incidents"
        )
    if names is None and target is None and not everything:
        raise MuteRefused(
            "this mute would silence every invariant on every target: pass --all to mean it"
        )
    text = reason.strip()
    if not text:
        raise MuteRefused("say why with --reason: it is shown beside every muted incident")
    if len(text) > MAX_REASON or printable(text) != text:
        raise MuteRefused(f"--reason must be printable text of at most {MAX_REASON} characters")
    if ends <= starts:
        raise MuteRefused("the mute ends before it starts: check --from and --for/--until")
    if ends <= now:
        raise MuteRefused("the mute would have ended already: check --for/--until")
    if ends - starts > LONGEST:
        raise MuteRefused(
            "a mute lasts at most 90 days; for an invariant that should not run, remove "
            "its file (or set its schedule) instead"
        )
    return names, text
