"""The `alert_roots` table: which delivery is an incident's root message in each channel,
the thread everything later about it goes in (its own root post, or the digest listing it).
Not pure: reads and writes the state store.
"""

from __future__ import annotations

from collections.abc import Sequence

from alerts.deliveries import Delivery
from alerts.ledger import read_delivery
from monitor.store.storage import Storage, Tx


class Roots:
    """Owns the `alert_roots` table."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def link(self, tx: Tx, incident_id: int, channel: str, delivery_id: int) -> None:
        """The incident's messages in `channel` go in the thread of `delivery_id`."""
        tx.run(
            "INSERT INTO alert_roots (incident_id, channel, delivery_id) VALUES (?, ?, ?)"
            " ON CONFLICT (incident_id, channel) DO UPDATE SET delivery_id = excluded.delivery_id",
            (incident_id, channel, delivery_id),
        )

    def channels(self, tx: Tx, incident_id: int) -> list[str]:
        """Every channel in which the incident has a root message."""
        found = tx.rows("SELECT channel FROM alert_roots WHERE incident_id = ?", (incident_id,))
        return [str(channel) for (channel,) in found]

    def root_id(self, tx: Tx, incident_id: int, channel: str) -> int | None:
        """The delivery that is the incident's root message in `channel`, if any."""
        found = tx.rows(
            "SELECT delivery_id FROM alert_roots WHERE incident_id = ? AND channel = ?",
            (incident_id, channel),
        )
        return int(found[0][0]) if found else None

    def forget(self, tx: Tx, delivery_ids: Sequence[int]) -> None:
        """Pruning: these deliveries go, and with them whatever thread they root (only
        threads of incidents closed before the cutoff: see alerts/ledger.py)."""
        if delivery_ids:
            marks = ", ".join("?" for _ in delivery_ids)
            tx.run(f"DELETE FROM alert_roots WHERE delivery_id IN ({marks})", delivery_ids)

    def root_of(self, incident_id: int, channel: str) -> Delivery | None:
        with self.storage.transaction() as tx:
            root_id = self.root_id(tx, incident_id, channel)
            if root_id is None:
                return None
            return read_delivery(tx, root_id)
