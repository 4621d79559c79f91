"""Signed Slack requests already seen, so a replay is refused across restarts too.

Owns the `slack_requests` table. Slack refuses requests older than five minutes; a
signature is remembered for twice that.
"""

from __future__ import annotations

from datetime import datetime

from monitor.clock import stamp
from monitor.store.storage import Storage


class SeenRequests:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def first_sighting(self, signature: str, at: datetime, forget_before: datetime) -> bool:
        """True the first time a request signature is seen; old ones are forgotten."""
        with self.storage.transaction() as tx:
            tx.run("DELETE FROM slack_requests WHERE seen_at < ?", (stamp(forget_before),))
            return bool(
                tx.rows(
                    "INSERT INTO slack_requests (signature, seen_at) VALUES (?, ?)"
                    " ON CONFLICT (signature) DO NOTHING RETURNING signature",
                    (signature, stamp(at)),
                )
            )
