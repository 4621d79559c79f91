"""Remembered catalog answers: `CatalogMemory` keeps what one database's catalog said about
each name for a while, and `CatalogMemory.over` puts it in front of a catalog. Pure: in
memory, on the clock it is given; thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

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

    def over(self, catalog: Catalog) -> Catalog:
        """`catalog` (the live one, on the connection at hand) behind this memory."""
        return _Remembering(self, catalog)

    def recall(
        self, kind: str, names: Iterable[Name], ask: Callable[[list[Name]], dict[Name, Any]]
    ) -> dict[Name, Any]:
        """The answer for each name: remembered ones, then one `ask` for the others. A name
        the catalog does not know is remembered as unknown (absent from the answer)."""
        wanted = sorted(set(names))
        with self._lock:
            if self._clock() - self._since >= self._remember:
                self._answers.clear()
                self._since = self._clock()
            known = {n: self._answers[(kind, n)] for n in wanted if (kind, n) in self._answers}
        missing = [n for n in wanted if n not in known]
        if missing:
            found = ask(missing)
            with self._lock:
                for name in missing:
                    self._answers[(kind, name)] = found.get(name, _UNKNOWN)
            known.update((n, found.get(n, _UNKNOWN)) for n in missing)
        return {n: answer for n, answer in known.items() if answer is not _UNKNOWN}


_UNKNOWN = object()  # remembered: the catalog has nothing by this name


class _Remembering:
    def __init__(self, memory: CatalogMemory, catalog: Catalog) -> None:
        self._memory = memory
        self._catalog = catalog

    @property
    def source(self) -> str:
        return self._catalog.source

    def functions(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._memory.recall("function", names, self._catalog.functions)

    def operators(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._memory.recall("operator", names, self._catalog.operators)

    def casts(self, types: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._memory.recall("cast", types, self._catalog.casts)

    def view_definitions(self, relations: Iterable[Name]) -> dict[Name, str]:
        return self._memory.recall("view", relations, self._catalog.view_definitions)

    def row_types(self, relations: Iterable[Name]) -> dict[Name, list[Routine]]:
        return self._memory.recall("row", relations, self._catalog.row_types)

    def implicit_casts(self, types: Iterable[Name]) -> dict[Name, list[str]]:
        return self._memory.recall("implicit", types, self._catalog.implicit_casts)

    def system_view_calls(self, relations: Iterable[Name]) -> dict[Name, list[str]]:
        return self._catalog.system_view_calls(relations)
