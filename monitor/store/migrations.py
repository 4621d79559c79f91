"""The state store's schema, as append-only migrations: one `.sql` file per step in
`schema/`, applied in the order of their numbers (0001_..., 0002_...). A released file is
never edited; a change is a new file. Written in the SQL both SQLite and PostgreSQL
understand, with the few type names that differ written as `{pk}`, `{bigint}` and `{real}`.

The ledger's tables (deliveries, alert_roots, slack_requests) are in the same sequence:
the store has one schema version, and its readers (status, the page) read them too.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

SCHEMA_PACKAGE = "monitor.store"
SCHEMA_FOLDER = "schema"


class BrokenSchema(Exception):
    """The shipped schema files are not a clean sequence (a packaging or editing mistake)."""


@cache
def migrations(pk: str, bigint: str, real: str) -> tuple[str, ...]:
    """Every step's statements, in order, with this store's type names."""
    types = {"{pk}": pk, "{bigint}": bigint, "{real}": real}
    return tuple(statements(f.read_text(encoding="utf-8"), types) for f in _steps())


def schema_version() -> int:
    """The schema version this invmon keeps a store at: its number of steps. Opening a
    store for the daemon migrates an older one to it and refuses a newer one
    (storage.migrate), so a running daemon's store is at this version."""
    return len(_steps())


@cache
def _steps() -> tuple[Traversable, ...]:
    folder = resources.files(SCHEMA_PACKAGE) / SCHEMA_FOLDER
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    numbers = [f.name.partition("_")[0] for f in files]
    expected = [f"{n:04d}" for n in range(1, len(files) + 1)]
    if numbers != expected:
        raise BrokenSchema(
            f"the schema files in {SCHEMA_PACKAGE}/{SCHEMA_FOLDER} are not numbered "
            f"0001..{len(files):04d} without gaps: {[f.name for f in files]}"
        )
    return tuple(files)


def statements(text: str, types: dict[str, str]) -> str:
    """A step's SQL as run: its comment lines dropped (SQLite's script runner splits on
    `;`, which a comment may hold) and the type names filled in."""
    kept = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    for token, name in types.items():
        kept = kept.replace(token, name)
    return kept
