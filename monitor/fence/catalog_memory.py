"""Remembered catalog answers: `CatalogMemory` keeps what one database's catalog said about
each name for a while, and `CatalogMemory.over` puts it in front of a catalog. `Asked`
records which names a verdict asks about, so that many texts' names are asked together
(`CatalogMemory.learn`). Pure: in memory, on the clock it is given; thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from monitor.fence.builtin_catalog import builtin_catalog
from monitor.fence.catalog import Catalog, Name, Routine


class CatalogMemory:
    """What one database's catalog answered about each name, remembered for a while.

    A catalog changes far less often than invariants run, and the invariants of one
    database call mostly the same names (count, now, =, the same tables), so a tick of many
    invariants asks the catalog about each name once instead of once per query. Everything
    is forgotten together after `remember` seconds, so a function redefined as VOLATILE is
    judged by its new definition within that window. Thread-safe: runs share one memory."""

    def __init__(self, remember: float, clock: Callable[[], float]) -> None:
        self._remember = remember
        self._clock = clock
        self._since = clock()
        self._answers: dict[tuple[str, Name], Any] = {}
        self._lock = threading.Lock()

    def over(self, catalog: Catalog, keep: bool = True) -> Catalog:
        """`catalog` (the live one, on the connection at hand) behind this memory; with
        `keep` false, what it answers is not remembered (a `Recording` behind it notes the
        names this memory does not know, and knows none of them)."""
        return _Remembering(self, catalog, keep)

    def recall(
        self,
        kind: str,
        names: Iterable[Name],
        ask: Callable[[list[Name]], dict[Name, Any]],
        keep: bool = True,
    ) -> dict[Name, Any]:
        """The answer for each name: remembered ones, then one `ask` for the others. A name
        the catalog does not know is remembered as unknown (absent from the answer); with
        `keep` false nothing `ask` answers is remembered."""
        wanted = sorted(set(names))
        with self._lock:
            if self._clock() - self._since >= self._remember:
                self._answers.clear()
                self._since = self._clock()
            known = {n: self._answers[(kind, n)] for n in wanted if (kind, n) in self._answers}
        missing = [n for n in wanted if n not in known]
        if missing:
            found = ask(missing)
            answers = {n: found.get(n, _UNKNOWN) for n in missing}
            if keep:
                with self._lock:
                    self._answers.update(((kind, n), a) for n, a in answers.items())
            known.update(answers)
        return {n: answer for n, answer in known.items() if answer is not _UNKNOWN}

    def learn(self, asked: Asked, catalog: Catalog) -> None:
        """Ask `catalog` about every name in `asked` not remembered yet: one question per
        kind of name, however many texts the names came from."""
        remembering = self.over(catalog)
        remembering.functions(asked.functions)
        remembering.operators(asked.operators)
        remembering.casts(asked.casts)
        remembering.view_definitions(asked.views)
        remembering.row_types(asked.rows)
        remembering.implicit_casts(asked.implicit)


@dataclass
class Asked:
    """The names a catalog was asked about, by kind."""

    functions: set[Name] = field(default_factory=set)
    operators: set[Name] = field(default_factory=set)
    casts: set[Name] = field(default_factory=set)
    views: set[Name] = field(default_factory=set)
    rows: set[Name] = field(default_factory=set)
    implicit: set[Name] = field(default_factory=set)

    def __bool__(self) -> bool:
        return any(
            (self.functions, self.operators, self.casts, self.views, self.rows, self.implicit)
        )

    def add(self, other: Asked) -> None:
        self.functions |= other.functions
        self.operators |= other.operators
        self.casts |= other.casts
        self.views |= other.views
        self.rows |= other.rows
        self.implicit |= other.implicit


class Recording:
    """A catalog that knows no name and notes in `asked` each one it is asked about.
    Behind a memory that keeps nothing (`CatalogMemory.over(Recording(), keep=False)`), a
    verdict notes the names the memory lacks: LiveFence.learn asks for those, then judges
    again for what the answers lead to (a view's own text)."""

    def __init__(self) -> None:
        self.asked = Asked()

    @property
    def source(self) -> str:
        return "no catalog"

    def functions(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        self.asked.functions.update(names)
        return {}

    def operators(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        self.asked.operators.update(names)
        return {}

    def casts(self, types: Iterable[Name]) -> dict[Name, list[Routine]]:
        self.asked.casts.update(types)
        return {}

    def view_definitions(self, relations: Iterable[Name]) -> dict[Name, str]:
        self.asked.views.update(relations)
        return {}

    def system_view_calls(self, relations: Iterable[Name]) -> dict[Name, list[str]]:
        # Answered by the shipped table, as LiveCatalog answers them: the functions a
        # system view calls are asked about in the same pass.
        return builtin_catalog().system_view_calls(relations)

    def row_types(self, relations: Iterable[Name]) -> dict[Name, list[Routine]]:
        self.asked.rows.update(relations)
        return {}

    def implicit_casts(self, types: Iterable[Name]) -> dict[Name, list[str]]:
        self.asked.implicit.update(types)
        return {}


_UNKNOWN = object()  # remembered: the catalog has nothing by this name


class _Remembering:
    def __init__(self, memory: CatalogMemory, catalog: Catalog, keep: bool) -> None:
        self._memory = memory
        self._catalog = catalog
        self._keep = keep

    @property
    def source(self) -> str:
        return self._catalog.source

    def functions(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._memory.recall("function", names, self._catalog.functions, self._keep)

    def operators(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._memory.recall("operator", names, self._catalog.operators, self._keep)

    def casts(self, types: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._memory.recall("cast", types, self._catalog.casts, self._keep)

    def view_definitions(self, relations: Iterable[Name]) -> dict[Name, str]:
        return self._memory.recall("view", relations, self._catalog.view_definitions, self._keep)

    def row_types(self, relations: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._memory.recall("row", relations, self._catalog.row_types, self._keep)

    def implicit_casts(self, types: Iterable[Name]) -> dict[Name, list[str]]:
        return self._memory.recall("implicit", types, self._catalog.implicit_casts, self._keep)

    def system_view_calls(self, relations: Iterable[Name]) -> dict[Name, list[str]]:
        return self._catalog.system_view_calls(relations)
