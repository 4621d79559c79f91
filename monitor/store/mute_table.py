"""The mutes table and the incidents each mute held (mutes.py has the rule). Every write
is one transaction; releasing a mute that ended is claimed by one conditional update, so of
the daemons of a fleet exactly one plans what it held."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from monitor.clock import parse_stamp, stamp
from monitor.store.mutes import Mute
from monitor.store.storage import Storage, Tx

_COLUMNS = (
    "id, selector, target, starts_at, ends_at, reason, created_by, created_at,"
    " ended_early_at, released_at"
)
SCHEMA_STEP = 13  # schema/0013_mutes.sql made the tables
LISTED = 500  # the most mutes a listing shows (newest first); each is small


def _stamp_or_none(value: Any) -> datetime | None:
    return None if value is None else parse_stamp(str(value))


def _mute(row: Sequence[Any]) -> Mute:
    i, selector, target, starts, ends, reason, by, created, early, released = row
    return Mute(
        int(i),
        None if selector is None else str(selector),
        None if target is None else str(target),
        parse_stamp(str(starts)),
        parse_stamp(str(ends)),
        str(reason),
        str(by),
        parse_stamp(str(created)),
        _stamp_or_none(early),
        _stamp_or_none(released),
    )


class MuteTable:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def kept(self) -> bool:
        """Whether this store has the table: a reading command opens a store without
        migrating it, and one still at an older release's schema has no mutes."""
        with self.storage.transaction() as tx:
            [(version,)] = tx.rows("SELECT max(version) FROM invmon_schema")
        return version is not None and int(version) >= SCHEMA_STEP

    def add(
        self,
        selector: str | None,
        target: str | None,
        starts: datetime,
        ends: datetime,
        reason: str,
        created_by: str,
        now: datetime,
    ) -> Mute:
        with self.storage.transaction() as tx:
            [(mute_id,)] = tx.rows(
                "INSERT INTO mutes (selector, target, starts_at, ends_at, reason, created_by,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (selector, target, stamp(starts), stamp(ends), reason, created_by, stamp(now)),
            )
            return self._get(tx, int(mute_id))

    def end(self, mute_id: int, now: datetime) -> Mute | None:
        """End a mute now (`invmon unmute`); None when there is no such mute. One already
        over is returned as it is."""
        with self.storage.transaction() as tx:
            tx.run(
                "UPDATE mutes SET ended_early_at = ? WHERE id = ? AND ended_early_at IS NULL"
                " AND ends_at > ?",
                (stamp(now), mute_id, stamp(now)),
            )
            found = tx.rows(f"SELECT {_COLUMNS} FROM mutes WHERE id = ?", (mute_id,))
        return _mute(found[0]) if found else None

    def listed(self, now: datetime, include_ended: bool = False) -> list[Mute]:
        """The mutes not yet over at `now` (and with `include_ended`, the latest others),
        newest first."""
        with self.storage.transaction() as tx:
            rows = tx.rows(f"SELECT {_COLUMNS} FROM mutes ORDER BY id DESC LIMIT {LISTED}")
        mutes = [_mute(r) for r in rows]
        return mutes if include_ended else [m for m in mutes if m.state(now) != "ended"]

    def current(self, tx: Tx, now: datetime) -> list[Mute]:
        """Those active at `now`, read inside the caller's transaction (alerting's plan)."""
        rows = tx.rows(
            f"SELECT {_COLUMNS} FROM mutes WHERE starts_at <= ? AND ends_at > ?"
            " AND (ended_early_at IS NULL OR ended_early_at > ?)",
            (stamp(now), stamp(now), stamp(now)),
        )
        return [_mute(r) for r in rows]

    def unreleased_since(self, tx: Tx, since: datetime) -> list[Mute]:
        """The mutes that were active at some time from `since` on and are not released:
        those that may cover an event created then (alerting's plan judges each event by
        when it was created, not by when it is planned)."""
        rows = tx.rows(
            f"SELECT {_COLUMNS} FROM mutes WHERE released_at IS NULL AND ends_at > ?"
            " AND (ended_early_at IS NULL OR ended_early_at > ?)",
            (stamp(since), stamp(since)),
        )
        return [_mute(r) for r in rows]

    def hold(self, tx: Tx, mute_id: int, incident_id: int) -> None:
        """`incident_id` was kept quiet by `mute_id`: it is looked at again when it ends."""
        tx.run(
            "INSERT INTO mute_holds (mute_id, incident_id) VALUES (?, ?)"
            " ON CONFLICT (mute_id, incident_id) DO NOTHING",
            (mute_id, incident_id),
        )

    def ended_unreleased(self, tx: Tx, now: datetime) -> list[Mute]:
        rows = tx.rows(
            f"SELECT {_COLUMNS} FROM mutes WHERE released_at IS NULL"
            " AND (ends_at <= ? OR ended_early_at <= ?) ORDER BY id",
            (stamp(now), stamp(now)),
        )
        return [_mute(r) for r in rows]

    def release(self, tx: Tx, mute_id: int, now: datetime) -> list[int] | None:
        """Claim the release of an ended mute: the incidents it held, or None when another
        daemon has released it already."""
        claimed = tx.rows(
            "UPDATE mutes SET released_at = ? WHERE id = ? AND released_at IS NULL RETURNING id",
            (stamp(now), mute_id),
        )
        if not claimed:
            return None
        held = tx.rows(
            "SELECT incident_id FROM mute_holds WHERE mute_id = ? ORDER BY incident_id",
            (mute_id,),
        )
        return [int(i) for (i,) in held]

    def _get(self, tx: Tx, mute_id: int) -> Mute:
        [row] = tx.rows(f"SELECT {_COLUMNS} FROM mutes WHERE id = ?", (mute_id,))
        return _mute(row)
