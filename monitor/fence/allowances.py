"""What an operator chose to trust (config `fence.*`), and how lint judges with no database."""

from __future__ import annotations

from dataclasses import dataclass

from monitor.fence.catalog import Catalog, Name, Routine
from monitor.fence.known import ALL_SETTINGS


@dataclass(frozen=True)
class Allowances:
    """Names an operator chose to trust (config `fence.allow_functions`, `allow_operators`,
    `allow_types`, `trust_extensions`, `allow_settings`): an entry `fn` trusts that name in
    any schema, `schema.fn` only there. All are lower-cased."""

    functions: frozenset[str] = frozenset()
    operators: frozenset[str] = frozenset()
    types: frozenset[str] = frozenset()
    extensions: frozenset[str] = frozenset()
    settings: frozenset[str] = frozenset()

    @staticmethod
    def _trusted(entries: frozenset[str], routine: Routine) -> bool:
        return routine.name.lower() in entries or (
            f"{routine.schema}.{routine.name}".lower() in entries
        )

    def function(self, routine: Routine) -> bool:
        return self._trusted(self.functions, routine)

    def named(self, name: Name) -> bool:
        """A function name, as written, that is trusted."""
        return ".".join(name).lower() in self.functions or name[-1].lower() in self.functions

    def operator(self, name: Name) -> bool:
        return ".".join(name).lower() in self.operators or name[-1] in self.operators

    def type(self, qualified: str) -> bool:
        """A type (`schema.name`, as the catalog gives it) trusted with all the code it
        runs: its input and output functions, its constraints."""
        bare = qualified.rpartition(".")[2]
        return qualified.lower() in self.types or bare.lower() in self.types

    def extension(self, routine: Routine) -> bool:
        return routine.extension is not None and routine.extension.lower() in self.extensions

    def setting(self, name: str) -> bool:
        return ALL_SETTINGS in self.settings or name.lower() in self.settings


TRUST_NOTHING = Allowances()


@dataclass(frozen=True)
class FencePolicy:
    """How lint judges a query with no database at hand."""

    allow: Allowances = TRUST_NOTHING
    # What the offline judge looks names up in; None is the built-in table (builtin_catalog.py).
    catalog: Catalog | None = None
    # False for commands that run against a database: a name the offline table does not
    # know is left to that database's own catalog, which judges it before every run.
    unknown_is_error: bool = True


OFFLINE = FencePolicy()
