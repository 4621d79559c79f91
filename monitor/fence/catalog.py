"""What PostgreSQL's catalog says a function, operator or cast may do: the questions the fence
asks (`Catalog`), the answer (`Routine`) and the facts every catalog shares. Pure.

The fence (fence.py) refuses a query that calls anything able to change the database or
the world outside it. It does not keep its own list of dangerous names: it asks
PostgreSQL's catalog, where every function declares its volatility (`pg_proc.provolatile`:
IMMUTABLE, STABLE or VOLATILE) and whether it may run in a parallel worker
(`proparallel = 'u'` marks the STABLE functions that assign state, such as a transaction
id). Two catalogs answer the same questions:

- `LiveCatalog` (live_catalog.py): the monitored database's own catalog, read on the
  connection that will run the query.
- `BuiltinCatalog` (builtin_catalog.py): a table generated from the built-in catalogs of
  the PostgreSQL versions we support, shipped in the package, for `invmon lint` with no
  database.

`CatalogMemory` (catalog_memory.py) remembers a catalog's answers for a while.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

# A name as written in the query: ("fn",) or ("schema", "fn"), already decoded and case-folded
# by PostgreSQL's own parser.
Name = tuple[str, ...]

VOLATILITY_ORDER = "isv"  # immutable < stable < volatile
# PostgreSQL's FirstNormalObjectId: initdb creates every built-in object below it, and every
# object created later (by CREATE, an extension, a superuser in pg_catalog) gets one above.
FIRST_USER_OID = 16384
# The C functions of PostgreSQL's xml.c that hand text to libxml2's parser (pg_proc.prosrc
# of internal functions, so an alias created under another name is found too): the input
# and receive functions of xml, the text -> xml cast, xml_is_well_formed* and XPath. The
# others (xml_out, xmlcomment, xmlconcat2, xmlelement's and xmlroot's work) escape text or
# read only the XML declaration, with PostgreSQL's own code. contrib/xml2 (`pgxml`) parses
# in every function.
LIBXML_PARSERS = frozenset(
    {
        "xml_in",
        "xml_recv",
        "texttoxml",
        "xml_is_well_formed",
        "xml_is_well_formed_document",
        "xml_is_well_formed_content",
        "xpath",
        "xpath_exists",
        "xmlexists",
    }
)
VOLATILITY_WORDS = {"i": "IMMUTABLE", "s": "STABLE", "v": "VOLATILE"}
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")


@dataclass(frozen=True)
class Routine:
    """A function (or the function behind an operator or a cast) as the fence sees it."""

    schema: str
    name: str
    signature: str  # for messages, e.g. "pg_catalog.lo_create(oid)"
    kind: str  # pg_proc.prokind: f function, a aggregate, w window, p procedure
    volatility: str  # i, s or v; for an aggregate, the worst of its support functions
    parallel_unsafe: bool  # proparallel = 'u'
    one_arg: bool  # callable with one argument, hence also as `row.name`
    security_definer: bool = False  # runs with its owner's rights, past the role's fence
    extension: str | None = None  # the extension that installed it, if one did
    builtin: bool = True  # part of PostgreSQL itself (an OID below FIRST_USER_OID)
    libxml: bool = False  # hands text to libxml2's parser (LIBXML_PARSERS)
    # For code a type runs: what it is to the type and which type, e.g. ("a constraint of
    # domain", "public.noisy"); empty for a function or operator called by name.
    role: str = ""
    of_type: str = ""


def worst(volatilities: Iterable[str]) -> str:
    return max(volatilities, key=VOLATILITY_ORDER.index, default="i")


class Catalog(Protocol):
    """Where the fence looks names up. A name missing from an answer is unknown."""

    @property
    def source(self) -> str: ...

    def functions(self, names: Iterable[Name]) -> dict[Name, list[Routine]]: ...

    def operators(self, names: Iterable[Name]) -> dict[Name, list[Routine]]: ...

    def casts(self, types: Iterable[Name]) -> dict[Name, list[Routine]]:
        """The functions a cast to each type may run; a type missing is not judged."""
        ...

    def view_definitions(self, relations: Iterable[Name]) -> dict[Name, str]:
        """The SQL of each relation that is a user-defined view; others are absent."""
        ...

    def system_view_calls(self, relations: Iterable[Name]) -> dict[Name, list[str]]:
        """For each relation that is a system view calling a VOLATILE or PARALLEL UNSAFE
        built-in function, those functions' names."""
        ...

    def row_types(self, relations: Iterable[Name]) -> dict[Name, list[Routine]]:
        """The code the column types of each relation run (`role` says which: output to send
        a row, input and constraints when a row of it is built from text or JSON)."""
        ...

    def implicit_casts(self, types: Iterable[Name]) -> dict[Name, list[str]]:
        """The casts into each type that PostgreSQL applies without being asked (implicit or
        in assignment), as `source -> target`; a type with none is absent."""
        ...
