"""The built-in catalog with no database (`BuiltinCatalog`): the functions, operators and
system views of the supported PostgreSQL versions, from the table shipped in the package.
`invmon lint` judges by it offline, and the live catalog asks it about system views.
Regenerate the table (builtins_table.py) with `python -m monitor.fence.builtins_table
--dsn DSN [--dsn DSN ...] > monitor/fence/pg_builtins.json`. Pure but for reading the
shipped file, once (`builtin_catalog`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from importlib import resources
from typing import Any

from monitor.fence.catalog import SYSTEM_SCHEMAS, Name, Routine


class BuiltinCatalog:
    """The built-in functions and operators of the supported PostgreSQL versions."""

    def __init__(self, table: dict[str, Any]) -> None:
        self._functions: dict[str, list[Any]] = table["functions"]
        self._operators: dict[str, str] = table["operators"]
        self._views: dict[str, list[str]] = table["views"]
        self.versions: list[str] = table["versions"]

    @property
    def source(self) -> str:
        return f"the built-in catalog of PostgreSQL {', '.join(self.versions)}"

    @staticmethod
    def _key(name: Name) -> str | None:
        if len(name) == 1:
            return name[0]
        if len(name) == 2 and name[0] == "pg_catalog":
            return name[1]
        if len(name) == 2 and name[0] in SYSTEM_SCHEMAS:
            return ".".join(name)
        return None  # another schema (or a database name): only the database can tell

    def functions(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        found: dict[Name, list[Routine]] = {}
        for name in names:
            key = self._key(name)
            entry = self._functions.get(key) if key else None
            if entry is None:
                continue
            volatility, unsafe, kinds, one_arg = entry
            schema, _, bare = key.rpartition(".") if key and "." in key else ("", "", key)
            schema = schema or "pg_catalog"
            found[name] = [
                Routine(
                    schema,
                    str(bare),
                    f"{schema}.{bare}",
                    kind,
                    volatility,
                    bool(unsafe),
                    bool(one_arg),
                )
                for kind in kinds
            ]
        return found

    def operators(self, names: Iterable[Name]) -> dict[Name, list[Routine]]:
        found: dict[Name, list[Routine]] = {}
        for name in names:
            key = self._key(name)
            volatility = self._operators.get(key) if key else None
            if volatility is not None:
                found[name] = [
                    Routine(
                        "pg_catalog", str(key), f"operator {key}", "f", volatility, False, False
                    )
                ]
        return found

    def casts(self, types: Iterable[Name]) -> dict[Name, list[Routine]]:
        # The built-in casts and type input functions are all IMMUTABLE or STABLE (checked
        # when the table is generated); a user-defined type is judged at run time.
        return {}

    def view_definitions(self, relations: Iterable[Name]) -> dict[Name, str]:
        return {}

    def row_types(self, relations: Iterable[Name]) -> dict[Name, list[Routine]]:
        # Without a database no table is known; the system catalogs' columns are built-in.
        return {}

    def implicit_casts(self, types: Iterable[Name]) -> dict[Name, list[str]]:
        # The built-in casts into xml are all explicit; only a database can add others.
        return {}

    def system_view_calls(self, relations: Iterable[Name]) -> dict[Name, list[str]]:
        found = {}
        for name in relations:
            key = self._key(name)
            if key is not None and key in self._views:
                found[name] = self._views[key]
        return found


@cache
def builtin_catalog() -> BuiltinCatalog:
    text = resources.files("monitor.fence").joinpath("pg_builtins.json").read_text(encoding="utf-8")
    return BuiltinCatalog(json.loads(text))
