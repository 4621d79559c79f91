"""Fixture files: the cases that prove an invariant fires, beside the invariant.

    # invariants/duplicate_settled_refunds.test.yaml
    cases:
      - name: two settled refunds for one dispute
        rows:
          accounts: [{account_id: 1, email: a@example.com}]
          refunds:
            - {refund_id: 1, dispute_id: 10, status: settled, settled_at: !sql now()}
        expect:
          keys: [[10]]            # the offending keys, exactly (one list per row)
      - name: a retry after a failure is fine
        rows: {...}
        expect:
          count: 0

Values are YAML; `!sql <expression>` inserts an SQL expression (now() - interval '3m').
Parsing and comparing are pure; running the cases is monitor/authoring/tester.py.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import yaml

from monitor import yamlsafe
from monitor.authoring.value_hints import text_hint
from monitor.invariants.validate import check_sql
from monitor.problems import Problem
from monitor.yamlsafe import StrictLoader, YamlProblem

SUFFIX = ".test.yaml"


@dataclass(frozen=True)
class SqlExpression:
    text: str


MAX_FIXTURE_BYTES = 1 << 20


class _Loader(StrictLoader):
    """The bounded loader (a key written twice, such as `refunds:` twice under `rows:`,
    would silently drop the first list), plus `!sql`."""


def _sql(loader: StrictLoader, node: yaml.Node) -> SqlExpression:
    text = str(loader.construct_scalar(node))  # type: ignore[arg-type]
    problem = sql_expression_problem(text)
    if problem:
        raise yaml.constructor.ConstructorError(
            None, None, f"!sql {text!r}: {problem}", node.start_mark
        )
    return SqlExpression(text)


def sql_expression_problem(text: str) -> str | None:
    """A `!sql` value must be one side-effect-free expression, not a statement."""
    analysis, problems = check_sql(f"SELECT {text}")
    statement = analysis.statement
    if analysis.problems and statement is None:
        message = analysis.problems[0].message
        return "not a valid SQL expression" if "cannot parse" in message else message
    if (
        statement is None
        or len(statement.get("targetList") or []) != 1
        or any(
            statement.get(clause)
            for clause in ("fromClause", "whereClause", "groupClause", "havingClause", "withClause")
        )
    ):
        return "must be a single expression such as now() - interval '1 hour'"
    errors = [p for p in problems if p.level == "error"]
    return errors[0].message if errors else None


_Loader.add_constructor("!sql", _sql)
EXPECT_FIELDS = {"keys", "count", "rows"}
CASE_FIELDS = {"name", "rows", "sources", "expect"}
OBJECT_FIELDS = {"key", "size", "last_modified", "etag"}  # a source object given inline


@dataclass(frozen=True)
class Case:
    name: str
    line: int
    rows: dict[str, list[dict[str, Any]]]
    keys: list[str] | None = None  # canonical offending keys, one per expected row
    count: int | None = None
    # Every offending row, on the columns listed (the same columns in each), as the
    # database returns them (numerics as strings with their exact digits).
    rows_expected: list[dict[str, Any]] | None = None
    # A source's listing, inline: {relation: [{key: …, size: …, last_modified: …}]}; a
    # source the case does not name is listed as empty.
    sources: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def fires(self) -> bool:
        return bool(self.keys) or bool(self.count) or bool(self.rows_expected)


@dataclass
class Fixture:
    path: Path
    cases: list[Case] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def fixture_path(invariant_path: Path) -> Path:
    return invariant_path.with_name(invariant_path.name.removesuffix(".sql") + SUFFIX)


def canonical_key(values: Any) -> str:
    """The same spelling rows.offending_key gives a row: a JSON list of the key values."""
    if not isinstance(values, list):
        values = [values]
    return json.dumps(values, ensure_ascii=False)


# What the `!sql` check says of a value it could not read as one expression: what YAML
# left of one cut at a comma. Any other problem (the fence's refusal of a function, a key
# written twice) is not one that quoting would change.
_CUT_SHORT = ("not a valid SQL expression", "must be a single expression")


def _hint(raw: bytes, line: int, message: str) -> str:
    """YAML reads `{at: !sql f(1, 2)}` as a mapping cut at each comma; say how to write it."""
    lines = raw.decode("utf-8", "replace").splitlines()
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    cut = any(words in message for words in _CUT_SHORT)
    unquoted = re.search(r"!sql\s+[^\s\"']", text) is not None  # a quoted one is not cut
    if unquoted and "{" in text and cut:
        return (
            "; inside {…} a `!sql` value with commas must be quoted, "
            "e.g. {placed_at: !sql 'make_timestamptz(2026, 1, 1, 0, 0, 0)'}"
        )
    return ""


def load_fixture(
    path: Path, key_columns: tuple[str, ...], sources: Collection[str] = ()
) -> Fixture:
    """The cases of one fixture file, or the problems that stop them (`key_columns` and
    `sources` are what the invariant's header declares)."""
    fixture = Fixture(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FIXTURE_BYTES + 1)
        document = yamlsafe.load(raw.decode("utf-8-sig"), MAX_FIXTURE_BYTES, _Loader)
    except YamlProblem as exc:
        hint = _hint(raw, exc.line, exc.message)
        fixture.problems.append(Problem(path, exc.line, exc.message + hint))
        return fixture
    except UnicodeDecodeError as exc:
        fixture.problems.append(Problem(path, 1, f"not UTF-8 text (byte {exc.start})"))
        return fixture
    except OSError as exc:
        fixture.problems.append(Problem(path, 1, f"cannot read the fixture: {exc.strerror}"))
        return fixture
    cases = (document or {}).get("cases") if isinstance(document, dict) else None
    if not isinstance(cases, list) or not cases:
        keys = set(document) if isinstance(document, dict) else set()
        hint = _did_you_mean({str(k) for k in keys} - {"cases"}, {"cases"})
        fixture.problems.append(Problem(path, 1, f"expected `cases:`, a list of named cases{hint}"))
        return fixture
    lines = _case_lines(path)
    for index, raw in enumerate(cases):
        line = lines[index] if index < len(lines) else 1
        case = _case(raw, index, line, (key_columns, sources), path, fixture.problems)
        if case is not None:
            fixture.cases.append(case)
    return fixture


def _case_lines(path: Path) -> list[int]:
    node = yaml.compose(path.read_text(encoding="utf-8"), Loader=_Loader)
    if not isinstance(node, yaml.MappingNode):
        return []
    for key, value in node.value:
        if key.value == "cases" and isinstance(value, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in value.value]
    return []


def _case(
    raw: Any,
    index: int,
    line: int,
    declared: tuple[tuple[str, ...], Collection[str]],
    path: Path,
    problems: list[Problem],
) -> Case | None:
    key_columns, source_names = declared
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        problems.append(Problem(path, line, f"case {index + 1}: needs a `name`"))
        return None
    name = raw["name"]
    for check in CASE_CHECKS:
        refused = check(raw, key_columns, source_names)
        if refused is not None:
            problems.append(Problem(path, line, f"{name!r}: {refused}"))
            return None
    expect = raw["expect"]
    rows_expected = expect.get("rows")
    keys = sorted(canonical_key(k) for k in expect["keys"] or []) if "keys" in expect else None
    expected_keys = list(keys or [])
    if (
        not keys
        and rows_expected
        and key_columns
        and all(k in rows_expected[0] for k in key_columns)
    ):
        expected_keys = [canonical_key([r[k] for k in key_columns]) for r in rows_expected]
    for repeated in sorted(k for k, n in Counter(expected_keys).items() if n > 1):
        problems.append(
            Problem(path, line, not_unique(name, key_columns, repeated), level="warning")
        )
    rows, sources = raw.get("rows") or {}, raw.get("sources") or {}
    return Case(name, line, rows, keys, expect.get("count"), rows_expected, sources)


# --- what makes a case unusable: each check says why, or None; the first refusal wins -------
# Each takes the raw case, the `key:` columns and the declared source names.

Raw: TypeAlias = dict[str, Any]
Keys: TypeAlias = tuple[str, ...]
Names: TypeAlias = Collection[str]
CaseCheck = Callable[[Raw, Keys, Names], str | None]


def _lists_of_objects(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(v, list) and all(isinstance(r, dict) for r in v) for v in value.values()
    )


def _unknown_fields(raw: Raw, keys: Keys, names: Names) -> str | None:
    unknown = set(raw) - CASE_FIELDS
    if not unknown:
        return None
    return f"unknown field(s) {sorted(unknown)}{_did_you_mean(unknown, CASE_FIELDS)}"


def _rows_shape(raw: Raw, keys: Keys, names: Names) -> str | None:
    if _lists_of_objects(raw.get("rows") or {}):
        return None
    return "`rows` maps each table to a list of rows"


def _sources_shape(raw: Raw, keys: Keys, names: Names) -> str | None:
    if _lists_of_objects(raw.get("sources") or {}):
        return None
    return "`sources` maps each source to a list of objects"


def _sources_declared(raw: Raw, keys: Keys, names: Names) -> str | None:
    return _sources_problem(raw.get("sources") or {}, names) or None


def _expect_fields(raw: Raw, keys: Keys, names: Names) -> str | None:
    expect = raw.get("expect")
    if not (isinstance(expect, dict) and set(expect) - EXPECT_FIELDS):
        return None
    extra = sorted(map(str, set(expect) - EXPECT_FIELDS))
    hint = _did_you_mean(set(extra), EXPECT_FIELDS) or "; use keys, count or rows"
    return f"unknown `expect` field(s) {extra}{hint}"


def _expect_given(raw: Raw, keys: Keys, names: Names) -> str | None:
    expect = raw.get("expect")
    if isinstance(expect, dict) and EXPECT_FIELDS & set(expect):
        return None
    return "`expect` needs `keys`, `count` or `rows`"


def _expect_rows(raw: Raw, keys: Keys, names: Names) -> str | None:
    rows = raw["expect"].get("rows")
    if rows is None or (
        isinstance(rows, list)
        and all(isinstance(r, dict) and r for r in rows)
        and len({tuple(sorted(r)) for r in rows}) <= 1
    ):
        return None
    return "`expect.rows` is a list of rows, each naming the same columns"


def _keys_need_a_key(raw: Raw, keys: Keys, names: Names) -> str | None:
    return "`keys` needs a `key:` header" if "keys" in raw["expect"] and not keys else None


def _count_whole(raw: Raw, keys: Keys, names: Names) -> str | None:
    count = raw["expect"].get("count")
    if count is None or (isinstance(count, int) and count >= 0):
        return None
    return "`count` must be a whole number"


CASE_CHECKS: tuple[CaseCheck, ...] = (
    _unknown_fields,
    _rows_shape,
    _sources_shape,
    _sources_declared,
    _expect_fields,
    _expect_given,  # the checks below may read raw["expect"] as a dict
    _expect_rows,
    _keys_need_a_key,
    _count_whole,
)


def _sources_problem(sources: dict[Any, list[dict[Any, Any]]], declared: Collection[str]) -> str:
    """What is wrong with a case's inline listings, offline (lint sees it too), or ""."""
    unknown = sorted(map(str, set(sources) - set(declared)))
    if unknown:
        hint = _did_you_mean(set(unknown), set(declared))
        return (
            f"`sources` names {', '.join(unknown)}, not a source of the header (declared: "
            f"{', '.join(sorted(declared)) or 'none'}){hint}"
        )
    for source, objects in sources.items():
        for given in objects:
            extra = sorted(map(str, set(given) - OBJECT_FIELDS))
            if extra or not isinstance(given.get("key"), str):
                return f"an object of {source} needs `key` (text) and takes size, " + (
                    f"last_modified and etag; not {', '.join(extra)}"
                    if extra
                    else "last_modified and etag"
                )
            size = given.get("size")
            if size is not None and (not isinstance(size, int) or isinstance(size, bool)):
                return f"an object of {source}: size must be a whole number"
    return ""


def _did_you_mean(unknown: set[str], known: set[str]) -> str:
    guesses = [
        f"{u!r} -> {close[0]!r}"
        for u in sorted(map(str, unknown))
        if (close := difflib.get_close_matches(u, sorted(known), n=1, cutoff=0.6))
    ]
    return f"; did you mean {', '.join(guesses)}?" if guesses else ""


def not_unique(case: str, key_columns: Sequence[str], key: str) -> str:
    """Offending rows are tracked by key: two rows with one key are one in an incident."""
    return (
        f"{case!r}: the key ({', '.join(key_columns)}) is not unique: {key} is expected more "
        "than once, and an incident tracks rows by key, so those rows would count as one "
        "(the count and the CSV keep them all)"
    )


@dataclass(frozen=True)
class CaseResult:
    case: Case
    passed: bool
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    count: int | None = None
    error: str | None = None
    found: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    hint: str | None = None  # how to write what the diff shows (text_hint)

    def describe(self) -> str:
        return "\n  ".join([self._verdict(), *(f"warning: {w}" for w in self.warnings)])

    def _verdict(self) -> str:
        if self.error:
            return f"❌ {self.case.name}: {self.error}"
        if self.passed:
            return f"✅ {self.case.name}"
        parts = []
        for label, found in (("missing", self.missing), ("unexpected", self.unexpected)):
            keys = [k for k in found if not k.startswith("row ")]
            rows = [r.removeprefix("row ") for r in found if r.startswith("row ")]
            if keys:
                parts.append(f"{label} keys {', '.join(keys)}")
            if rows:
                parts.append(f"{label} rows {'; '.join(rows)}")
        if self.case.count is not None and self.count != self.case.count:
            shown = ", ".join(self.found[:10]) + (" …" if len(self.found) > 10 else "")
            parts.append(
                f"expected {self.case.count} offending rows, got {self.count}"
                + (f": {shown}" if shown else "")
            )
        return f"❌ {self.case.name}: " + "; ".join([*parts, *([self.hint] if self.hint else [])])


def compare(
    case: Case,
    found_keys: list[str],
    count: int,
    found_rows: list[dict[str, Any]] | None = None,
    columns: list[str] | None = None,
) -> CaseResult:
    """Exact comparison: every expected key, no other, the count when given, and the rows
    when given (each as multisets: a join that returns one offender twice is a defect).
    An expected row naming a column the query does not return (`columns`) is an error: it
    was compared as null, and passed where the expected value was null."""
    if case.rows_expected and columns is not None:
        named = sorted({c for row in case.rows_expected for c in row} - set(columns))
        if named:
            return CaseResult(
                case,
                False,
                error=f"`expect.rows` names {', '.join(named)}, which the query does not "
                f"return (it returns {', '.join(columns)})",
            )
    missing, unexpected = [], []
    if case.keys is not None:
        expected, found = Counter(case.keys), Counter(found_keys)
        missing = sorted((expected - found).elements())
        unexpected = sorted((found - expected).elements())
    if case.rows_expected is not None:  # `rows: []` expects none: not "anything goes"
        shown = case.rows_expected[0] if case.rows_expected else (found_rows or [{}])[0]
        columns = sorted(shown)
        expected = Counter(_row_text(r, columns) for r in case.rows_expected)
        found = Counter(_row_text(r, columns) for r in found_rows or [])
        missing += [f"row {r}" for r in sorted((expected - found).elements())]
        unexpected += [f"row {r}" for r in sorted((found - expected).elements())]
    count_ok = case.count is None or case.count == count
    return CaseResult(
        case,
        not missing and not unexpected and count_ok,
        missing,
        unexpected,
        count,
        found=sorted(found_keys),
        hint=text_hint(missing, unexpected),
    )


def _row_text(row: dict[str, Any], columns: list[str]) -> str:
    return json.dumps({c: row.get(c) for c in columns}, ensure_ascii=False, sort_keys=True)
