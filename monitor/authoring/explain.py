"""`invmon explain`: what each invariant would cost the replica, before it is merged.

EXPLAIN (FORMAT JSON) each query (without ANALYZE unless asked) and report the planner's
total cost, estimated rows and the nodes worth a reviewer's attention; a `max_cost` (header
or config) turns an excess into a failure. Reading a plan is pure; running EXPLAIN is not.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg

from monitor.execution.check import role_refusal
from monitor.execution.deadlines import Cut, Deadlines, own_questions, past_timeout
from monitor.execution.execute import (
    CLIENT_ENCODING,
    LiveFence,
    Refused,
    begin_read_only,
    listing_cursor,
    send_one_statement,
)
from monitor.execution.redaction import Redaction
from monitor.execution.runner import describe_error
from monitor.fence.allowances import TRUST_NOTHING, Allowances
from monitor.invariants.loader import Invariant
from monitor.sources.binding import NOTHING_BOUND, Bound, bind, standalone
from monitor.sources.listing import Lister, ListingError, list_source, listed_and_bound

BIG_RELATION_ROWS = 100_000  # a sequential scan over more rows than this is worth a look


@dataclass(frozen=True)
class PlanSummary:
    total_cost: float
    rows: float
    notable: list[str] = field(default_factory=list)
    actual_ms: float | None = None


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans") or []:
        yield from _nodes(child)


def scanned_relations(explained: list[dict[str, Any]]) -> set[str]:
    return {
        str(node["Relation Name"])
        for node in _nodes(explained[0]["Plan"])
        if node.get("Node Type") == "Seq Scan" and node.get("Relation Name")
    }


def summarize(explained: list[dict[str, Any]], sizes: dict[str, float]) -> PlanSummary:
    """From EXPLAIN (FORMAT JSON) output and the planner's row counts of the relations."""
    root = explained[0]
    plan = root["Plan"]
    notable = []
    for node in _nodes(plan):
        kind = node.get("Node Type", "")
        relation = node.get("Relation Name")
        rows = float(node.get("Plan Rows", 0))
        size = sizes.get(str(relation), 0.0)
        if kind == "Seq Scan" and relation and size >= BIG_RELATION_ROWS:
            notable.append(f"Seq Scan on {relation} (~{size:,.0f} rows in the table)")
        elif kind in ("Nested Loop",) and rows >= BIG_RELATION_ROWS * 10:
            notable.append(f"Nested Loop producing ~{rows:,.0f} rows")
    return PlanSummary(
        total_cost=float(plan["Total Cost"]),
        rows=float(plan["Plan Rows"]),
        notable=notable,
        actual_ms=root.get("Execution Time"),
    )


@dataclass(frozen=True)
class Explained:
    invariant: str
    summary: PlanSummary | None
    max_cost: float | None
    error: str | None = None
    # Each source's objects as planned: the number listed, or None for an empty listing
    # (--empty-sources), which leaves the listing's size out of the cost.
    sources: dict[str, int | None] = field(default_factory=dict)

    @property
    def over_budget(self) -> bool:
        return bool(
            self.summary and self.max_cost is not None and self.summary.total_cost > self.max_cost
        )


def explain_all(
    dsn: str,
    invariants: Sequence[Invariant],
    default_max_cost: float | None,
    analyze: bool,
    allow: Allowances = TRUST_NOTHING,
    lock_timeout: timedelta = timedelta(seconds=5),
    lister: Lister | None = list_source,
    redaction: Redaction | None = None,
    role: RoleRule | None = None,
    connect_timeout: timedelta = timedelta(seconds=10),
    overrun_margin: timedelta = timedelta(seconds=10),
) -> list[Explained]:
    """EXPLAIN each invariant, judged by the fence first: ANALYZE runs the query. Sources
    are listed with `lister` and planned with what it found, as a run would send them;
    with None, as empty listings. With `role`, a role that can change the database is
    refused as `check` refuses it, unless the rule allows it: planning runs code too.

    Errors are masked as a run's are (redaction.py): under ANALYZE the database's message
    can quote a value of a row (`invalid input syntax for type integer: "…"`). Without
    `redaction`, the default detectors under a key of this call's own.

    Each wait is bounded on this side too, as a run's is (deadlines.py): an EXPLAIN by its
    invariant's timeout and `overrun_margin`; one cut leaves the next on a new connection."""
    redaction = redaction or Redaction(secrets.token_bytes(32))
    out = []
    options = "ANALYZE, BUFFERS, FORMAT JSON" if analyze else "FORMAT JSON"
    live_fence = LiveFence(allow)
    deadlines = Deadlines("explain")

    def connected() -> psycopg.Connection[Any]:
        conn = psycopg.connect(
            dsn,
            autocommit=False,
            client_encoding=CLIENT_ENCODING,
            connect_timeout=max(1, int(connect_timeout.total_seconds())),
            application_name="invmon",
        )
        conn.read_only = True
        return conn

    conn = connected()
    try:
        refusal = None
        if role is not None and not role.allowed:
            own, said = own_questions(connect_timeout, overrun_margin)
            try:
                with deadlines.bounded(conn, own, "the read of the role", said):
                    refusal = role_refusal(conn, role.target, role.how_to_allow, "not explained")
            except Cut as exc:
                refusal = str(exc)
        for inv in invariants:
            limit = inv.header.max_cost if inv.header.max_cost is not None else default_max_cost
            if refusal is not None:
                out.append(Explained(inv.name, None, limit, refusal))
                continue
            masker = redaction.masker(inv.header.redact, inv.header.show)
            try:
                bound, sources = _listed(inv, lister)
            except ListingError as exc:
                # An object's key is data of the store's: masked like a value of a row.
                out.append(Explained(inv.name, None, limit, masker.text(str(exc))))
                continue
            if conn.broken:
                conn.close()
                conn = connected()  # the last one was cut: this one is not its casualty
            longest, past = past_timeout(inv.timeout, overrun_margin)
            try:
                with deadlines.bounded(conn, longest, "the EXPLAIN", past), conn.transaction():
                    begin_read_only(conn, inv, lock_timeout)
                    text, params, user_line = standalone(bound, inv.sql)
                    live_fence.refuse_unless_allowed(conn, text, inv, user_line)
                    with listing_cursor(conn) if params else conn.cursor() as cur:
                        send_one_statement(cur, f"EXPLAIN ({options})\n{text}", params or None)
                        row = cur.fetchone()
                    assert row is not None
                    sizes: dict[str, float] = dict(
                        conn.execute(
                            "SELECT relname::text, reltuples::float8 FROM pg_class"
                            " WHERE relname = ANY(%s) AND relkind IN ('r', 'p', 'm')",
                            (sorted(scanned_relations(row[0])),),
                        ).fetchall()
                    )
            except Refused as exc:
                refused = f"refused by the read-only fence: {exc}"
                out.append(Explained(inv.name, None, limit, refused, sources))
                continue
            except psycopg.Error as exc:
                error = masker.text(describe_error(exc))
                out.append(Explained(inv.name, None, limit, error, sources))
                continue
            out.append(Explained(inv.name, summarize(row[0], sizes), limit, None, sources))
    finally:
        conn.close()
        deadlines.close()
    return out


@dataclass(frozen=True)
class RoleRule:
    """Whether a target may be explained as a role that can change the database."""

    target: str
    allowed: bool
    how_to_allow: str


def _listed(inv: Invariant, lister: Lister | None) -> tuple[Bound, dict[str, int | None]]:
    """What to plan `inv` with: its sources listed (as a run sends them), or empty."""
    sources = inv.header.source
    if not sources:
        return NOTHING_BOUND, {}
    if lister is None:
        return bind(sources, {name: [] for name in sources}), dict.fromkeys(sources)
    bound, listings = listed_and_bound(sources, lister)
    return bound, {name: len(listing.rows) for name, listing in listings.items()}


def _source_notes(r: Explained) -> list[str]:
    return [
        f"source {name}: planned as an empty listing (--empty-sources): the cost leaves the "
        "listing out"
        if objects is None
        else f"source {name}: planned with the {objects:,} objects listed now"
        for name, objects in r.sources.items()
    ]


def explain_text(results: Sequence[Explained]) -> tuple[str, int]:
    """The report and the exit code: 0 within budget, 1 over budget, 2 could not explain."""
    lines = []
    for r in results:
        if r.summary is None:
            lines.append(f"⚠️  {r.invariant}: cannot explain: {r.error}")
            lines += [f"     {note}" for note in _source_notes(r)]
            continue
        budget = "" if r.max_cost is None else f" (max_cost {r.max_cost:,.0f})"
        mark = "❌" if r.over_budget else "✅"
        ran = "" if r.summary.actual_ms is None else f", ran in {r.summary.actual_ms:,.0f} ms"
        lines.append(
            f"{mark} {r.invariant}: cost {r.summary.total_cost:,.0f}{budget}, "
            f"~{r.summary.rows:,.0f} rows{ran}"
        )
        lines += [f"     {note}" for note in [*r.summary.notable, *_source_notes(r)]]
    over = [r.invariant for r in results if r.over_budget]
    if over:
        lines.append(
            f"\nOver budget: {', '.join(over)}. Add an index, narrow the query, or "
            "raise max_cost in its header if the cost is worth paying."
        )
    code = 2 if any(r.summary is None for r in results) else (1 if over else 0)
    return "\n".join(lines), code


def explain_document(results: Sequence[Explained]) -> dict[str, Any]:
    return {
        "results": [
            {
                "invariant": r.invariant,
                "cost": r.summary.total_cost if r.summary else None,
                "rows": r.summary.rows if r.summary else None,
                "actual_ms": r.summary.actual_ms if r.summary else None,
                "notable": r.summary.notable if r.summary else [],
                "max_cost": r.max_cost,
                "over_budget": r.over_budget,
                "error": r.error,
                # name: objects planned with, or null for an empty listing (--empty-sources)
                "sources": r.sources,
            }
            for r in results
        ],
        "exit_code": explain_text(results)[1],
    }
