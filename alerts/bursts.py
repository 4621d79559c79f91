"""When planning lets a channel's pending events go, and when it holds them back so that a
burst of openings becomes one digest. Pure: the planner (alerts/alerter.py) gathers what it
knows of each channel and this decides.

A digest is one channel's, so the rule is decided per channel: a burst in one channel never
holds another channel's alert. Until issue 33 one quiet window was measured over all pending
events together, so every alert waited at least `digest_window` after the newest event of
any channel, and a busy channel could hold a quiet one for up to six windows.

What holding is for: `digest_threshold` openings in one channel planned together become one
digest message, and openings planned while that digest is recent join it
(`digest_group_interval`). Holding serves only to gather a burst's first openings, so a
channel's openings are held only while more of the same burst may still be on their way:

1. No opening among the channel's pending events: they go now. Updates, replies and
   resolutions never join a digest; holding them would only delay them.
2. `digest_threshold` openings or more and no recent digest of the channel to join: they go
   now, as a digest. (Joining a recent digest needs no threshold, so during a burst the
   joiners gather instead: one edit of the digest for them, not one per few runs.)
3. Held long enough: `digest_window` quiet since the channel's newest pending event, or six
   windows since its oldest, the bounds the planner always had. They go, whatever else.
4. Otherwise they are held while a burst may still be arriving, and go as soon as it is not:
   - a run of an invariant routed to this channel is due or in flight on this daemon: its
     opening, if it has one, is moments away (the daemon wakes the planner when a run is
     stored, so the batch goes the moment the last of them is);
   - an opening was planned in this channel within the last `digest_window`, by any daemon:
     the burst's first openings went already, and the rest gather behind them.

So a lone incident in a quiet channel is planned as soon as its run is stored, with no
window at all; openings of one tick (or of a start-up) in one channel wait for each other's
runs and go together, as one digest when there are enough; and a burst whose runs are spread
over several ticks (the schedule's jitter) loses only its first opening to a root of its
own, the rest gathering until the channel is quiet.

While a channel's openings are held, its other events still go, unless they are about an
incident whose opening is among those held (an incident's events are planned in order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from monitor.store.incidents import OPENING_EVENTS
from monitor.store.records import StoredEvent

WAITED = 6  # windows since its oldest event after which a batch goes, however busy


@dataclass(frozen=True)
class Rule:
    """The config's part: slack.digest_window and slack.digest_threshold."""

    window: timedelta
    threshold: int


@dataclass(frozen=True)
class Channel:
    """What the planner knows of one channel when it decides."""

    events: Sequence[StoredEvent]  # its pending events, oldest first
    running: bool  # a run of an invariant routed here is due or in flight on this daemon
    last_opening: datetime | None  # when an opening was last planned here (any daemon)
    digest_open: bool  # a digest of this channel is recent enough to join


@dataclass(frozen=True)
class Decision:
    go: tuple[StoredEvent, ...]  # to plan now, oldest first
    held_until: datetime | None  # when the rest go at the latest; None: nothing held


def release_at(channel: Channel, now: datetime, rule: Rule) -> datetime:
    """When the channel's openings may be planned: `now` or earlier means now; a later
    time is the most they wait, unless something changes first (a run stored)."""
    openings = [e for e in channel.events if e.kind in OPENING_EVENTS]
    if not openings:
        return now
    if len(openings) >= rule.threshold and not channel.digest_open:
        return now
    newest = max(e.created_at for e in channel.events)
    oldest = min(e.created_at for e in channel.events)
    bound = min(newest + rule.window, oldest + WAITED * rule.window)
    if bound <= now:
        return bound
    arriving = channel.running or (
        channel.last_opening is not None and channel.last_opening > now - rule.window
    )
    return bound if arriving else now


def decide(channel: Channel, now: datetime, rule: Rule) -> Decision:
    """The channel's events to plan now, and until when the others are held."""
    at = release_at(channel, now, rule)
    if at <= now:
        return Decision(tuple(channel.events), None)
    held = {e.incident_id for e in channel.events if e.kind in OPENING_EVENTS}
    return Decision(tuple(e for e in channel.events if e.incident_id not in held), at)
