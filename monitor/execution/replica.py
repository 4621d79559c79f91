"""Replica awareness: is the monitored server a standby, and how far behind is it?

An invariant evaluated on a standby that is behind sees an old state of the data: a violation
already fixed on the primary may still show, and a new one may not show yet. The runner can
read a `ReplicaStatus` before a run and skip or annotate the run when `is_stale` says so.

How lag is measured (all in one SELECT, valid inside a READ ONLY transaction):

* On a primary (`pg_is_in_recovery()` false) lag is 0.0.
* On a standby that has replayed all the WAL it received (`pg_last_wal_receive_lsn() <=
  pg_last_wal_replay_lsn()`), whose WAL receiver is `streaming`, and which heard from the
  primary (`pg_stat_wal_receiver.last_msg_receipt_time`) no longer ago than its own
  `wal_receiver_timeout` (when that is above 0), lag is 0.0, however old its last replayed
  commit and however long the primary has been silent within that timeout. A primary
  streams WAL as it is written, so a link that is up and has delivered everything has
  nothing behind it; an idle primary sends nothing at all until the receiver pings it, which
  the receiver does after wal_receiver_timeout / 2 of silence (30 s by default), so the time
  since it last heard legitimately ages that far with nothing outstanding (measured on
  PostgreSQL 15 and 16: a sawtooth up to 29-30 s on an idle primary). A link that
  breaks without closing also leaves "everything received replayed": the receiver ends it
  after wal_receiver_timeout of silence (60 s by default), and this rule stops vouching for it
  at the same moment, so a silent primary reads as caught up for at most that long.
  `<=` rather than `=`: right after the WAL receiver (re)starts it reports the start of the
  segment it streams from, which can be before what was already replayed from local WAL;
  nothing received is then waiting either.
* Otherwise (WAL received but not yet replayed, a receiver not streaming or silent past its
  timeout, `wal_receiver_timeout = 0`, no streaming at all as in archive recovery, or a role
  that cannot see pg_stat_wal_receiver) lag is the age of the last replayed commit,
  `statement_timestamp() - pg_last_xact_replay_timestamp()`, clamped at 0 (the commit time
  comes from the primary's clock). That is an upper bound of the real lag: nothing older
  than that commit can be missing.
* When there is no replayed commit to measure from (none replayed since the standby
  started) and the standby is not caught up as above, lag is unknown: None.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import tuple_row


@dataclass(frozen=True)
class ReplicaStatus:
    in_recovery: bool
    """`pg_is_in_recovery()`: true on a standby (or a server in archive recovery)."""
    lag_seconds: float | None
    """0.0 on a primary and on a standby caught up over a live link (see the module
    docstring); else the age of the last replayed commit; None when that is unknown."""


# One round trip, read-only functions only. statement_timestamp() rather than now(): in a
# long READ ONLY transaction now() is the transaction's start and would understate the lag.
# The age is clamped in Python, not with greatest(), which would turn NULL (unknown) into 0.
# The fourth column is how long ago the WAL receiver last heard from the primary while
# streaming, the fifth the receiver's own timeout in seconds: within it, silence is an idle
# primary; past it, PostgreSQL itself calls the link dead. The columns of
# pg_stat_wal_receiver need pg_read_all_stats (or pg_monitor); without it they are NULL and
# the lag falls back to the age of the last replayed commit. current_setting() is readable
# by any role; its text ('1min', '500ms', '0') is valid interval input.
_STATUS_SQL = """
SELECT pg_is_in_recovery(),
       pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn(),
       extract(epoch FROM statement_timestamp() - pg_last_xact_replay_timestamp())::float8,
       (SELECT extract(epoch FROM statement_timestamp() - last_msg_receipt_time)::float8
          FROM pg_stat_wal_receiver WHERE status = 'streaming'),
       extract(epoch FROM current_setting('wal_receiver_timeout')::interval)::float8
"""


def read_replica_status(conn: psycopg.Connection[Any]) -> ReplicaStatus:
    """Read the server's recovery state and replication lag with a single SELECT.

    Runs in whatever transaction `conn` is in (READ ONLY is fine); it neither begins nor
    ends one, and does not depend on the connection's row factory.
    """
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(_STATUS_SQL)
        row = cur.fetchone()
    if row is None:  # a SELECT without FROM always returns one row
        raise RuntimeError("replica status query returned no row")
    in_recovery, replayed_all_received, replay_age, heard_from_primary, receiver_timeout = row
    return ReplicaStatus(
        in_recovery=bool(in_recovery),
        lag_seconds=_lag_seconds(
            bool(in_recovery),
            replayed_all_received,
            replay_age,
            heard_from_primary,
            receiver_timeout,
        ),
    )


def _lag_seconds(
    in_recovery: bool,
    replayed_all_received: bool | None,
    replay_age: float | None,
    heard_from_primary: float | None,
    receiver_timeout: float | None,
) -> float | None:
    """The lag rule of the module docstring, from the query's columns.

    `replayed_all_received` is NULL when either LSN is unknown (not streaming);
    `replay_age` is NULL when no commit has been replayed since the standby started;
    `heard_from_primary` is NULL when the receiver is not streaming (or not visible);
    `receiver_timeout` is `wal_receiver_timeout` in seconds, 0 when disabled.
    """
    if not in_recovery:
        return 0.0
    if (
        replayed_all_received
        and heard_from_primary is not None
        and receiver_timeout is not None
        and receiver_timeout > 0
        and heard_from_primary <= receiver_timeout
    ):
        # A live link that delivered everything: nothing is behind, however quiet the
        # primary. With the timeout disabled nothing bounds how long a dead link could pass
        # for a quiet one, so that case is dated by the last commit below instead.
        return 0.0
    if replay_age is None:
        return None
    return max(0.0, float(replay_age))


def is_stale(status: ReplicaStatus, max_lag: timedelta) -> bool:
    """Whether data read from this server may be more than `max_lag` behind the primary.

    A primary is never stale. On a standby, a lag strictly greater than `max_lag` is stale
    (a lag equal to it is not). An unknown lag on a standby counts as stale: lag is None only
    when the standby cannot show that it is caught up over a live link and has no replayed
    commit to date the data by (archive recovery, WAL waiting to be replayed just after
    start-up, a link down before any commit), so there is no evidence the data is fresh,
    and acting on possibly old data is the failure this check exists to prevent.
    """
    if max_lag < timedelta(0):
        raise ValueError(f"max_lag must not be negative, got {max_lag}")
    if not status.in_recovery:
        return False
    if status.lag_seconds is None:
        return True
    return status.lag_seconds > max_lag.total_seconds()
