"""Presenting results: a table for people, a JSON document for programs. Pure functions."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from monitor.clock import shown
from monitor.invariants.header import DEFAULT_TARGET
from monitor.problems import Problem
from monitor.text import counted, cut_distinct, printable, shown_value

if TYPE_CHECKING:  # for the annotations only: `lint` renders without the store's records
    from monitor.execution.results import RunResult
    from monitor.invariants.loader import Invariant
    from monitor.store.mutes import Mute
    from monitor.store.records import Incident, Run

STATUS_LABEL = {
    "ok": "✅ ok",
    "violated": "❌ violated",
    "error": "⚠️  error",
    "stale": "⏸️  stale",
}
# An incident's state in words; retired (its file removed while it was open) is never
# shown as resolved: nothing was fixed.
STATE_LABEL = {"open": "open", "resolved": "✅ resolved", "retired": "🗄️ retired"}
_CELL_WIDTH = 28


def results_document(
    results: Sequence[RunResult],
    invariants: Sequence[Invariant],
    problems: Sequence[Problem],
    routes: Mapping[str, tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """`routes`: each invariant's Slack channel and the rule that chose it."""
    by_name = {i.name: i for i in invariants}
    out = []
    for result in results:
        inv = by_name.get(result.invariant)
        channel, route = (routes or {}).get(result.invariant, (None, None))
        out.append(
            {
                "invariant": result.invariant,
                "target": result.target,
                "status": result.status,
                "count": result.count,
                "rows": result.rows,
                "truncated": result.truncated,
                "cut_values": result.cut_values,
                "rows_withheld": result.rows_withheld,
                "notes": bounds_notes(result),
                "duration_ms": round(result.duration_ms, 1),
                "listing_ms": None if result.listing_ms is None else round(result.listing_ms, 1),
                "error": result.error,
                "severity": inv.severity if inv else None,
                "description": inv.description if inv else None,
                "channel": channel,
                "route": route,
            }
        )
    return {
        "results": out,
        "problems": [
            {"path": str(p.path), "line": p.line, "message": p.message, "level": p.level}
            for p in problems
        ],
    }


def to_json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False)


_ISO_TIMESTAMP = re.compile(
    r"^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(\.\d+)?([+-]\d\d:\d\d|Z)?\Z"
)  # \Z: no newline after


def _cell(value: Any, width: int = _CELL_WIDTH, of_a_row: bool = False) -> str:
    """A table's cell: a row's value as text.shown_value writes it (never mistaken for
    another value), or one of invmon's own (a name, a status, a time) on one line; either
    way no escape sequence reaches the terminal."""
    if of_a_row:
        return cut_distinct(shown_value(value), max(width, _ROW_CELL_WIDTH))
    # invmon's own times are shown to the second; the JSON output keeps them whole.
    stamp = _ISO_TIMESTAMP.match(value) if isinstance(value, str) else None
    if stamp:
        text = f"{stamp.group(1)} {stamp.group(2)}{stamp.group(4) or ''}"
    else:
        plain = "∅" if value is None else value if isinstance(value, str) else json.dumps(value)
        text = printable(" ".join(str(plain).split()))
    return text if len(text) <= width else text[: width - 1] + "…"


_NAME_WIDTH = 100  # names are what a reader copies into the next command: cut only when absurd
# A row's value is shown as the database held it (a timestamp to the microsecond, a text
# that looks like one as its text); one longer than this is cut, and then ends with a digest
# of the whole, so that two values that differ past the cut never show alike.
_ROW_CELL_WIDTH = 40


def text_table(
    header: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "", of_rows: bool = False
) -> str:
    """`of_rows`: the cells are offending rows' values (_cell)."""
    limits = [_NAME_WIDTH if h in ("invariant", "target") else _CELL_WIDTH for h in header]
    cells = [[_cell(v, w, of_rows) for v, w in zip(row, limits, strict=True)] for row in rows]
    widths = [len(h) for h in header]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = [indent + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append(indent + "  ".join("─" * w for w in widths))
    lines += [
        indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]
    return "\n".join(lines)


def bounds_notes(result: RunResult) -> list[str]:
    """What the run's bounds left out of its rows, said where the rows are shown."""
    notes = []
    if result.cut_values:
        notes.append(
            f"{result.cut_values:,} value{'s' * (result.cut_values != 1)} longer than "
            f"{result.cell_bytes:,} bytes cut by the database; each says its size (and md5, "
            "unless masking left it out)"
        )
    if result.rows_withheld:
        notes.append(
            f"{counted(result.rows_withheld, 'row')} of the sample "
            "left out to keep the run within limits.sample_bytes"
        )
    return notes


# Where the command line's database comes from, for a hint: a caller with other ways in
# (the pytest plugin) says its own.
DSN_SOURCES = "--dsn, INVMON_DSN, or `dsn:` / `targets:` in invmon.yaml"


def results_table(
    results: Sequence[RunResult], sample_rows: int = 3, dsn_sources: str = DSN_SOURCES
) -> str:
    several = names_targets(r.target for r in results)
    summary = text_table(
        ["invariant", *(["target"] if several else []), "status", "count", "duration"],
        [
            [
                r.invariant,
                *([r.target] if several else []),
                STATUS_LABEL[r.status],
                "-" if r.count is None else f"{r.count:,}",
                f"{r.duration_ms:,.0f} ms",
            ]
            for r in results
        ],
    )
    details = _shared_errors(results, dsn_sources)
    repeated = _repeated(results)
    shared = {r.invariant for r in results if _error_key(r) in repeated}
    for r in results:
        if r.status == "error" and r.invariant not in shared:
            reason = printable(r.error or "")
            details.append(f"\n{printable(r.invariant)}: could not be evaluated\n    {reason}")
        elif r.status == "violated" and r.rows:
            shown = r.rows[:sample_rows]
            more = r.count - len(shown) if r.count is not None else 0
            cells = [[row.get(c) for c in r.columns] for row in shown]
            table = text_table([printable(c) for c in r.columns], cells, "    ", of_rows=True)
            tail = f"\n    … and {more:,} more" if more > 0 else ""
            tail += "".join(f"\n    ({note})" for note in bounds_notes(r))
            name = printable(r.invariant)
            details.append(f"\n{name}: {counted(r.count or 0, 'offending row')}\n{table}{tail}")
    held = sum(r.status == "ok" for r in results)
    violated = sum(r.status == "violated" for r in results)
    errored = sum(r.status == "error" for r in results)
    footer = f"\n\n{held} held, {violated} violated, {errored} could not be evaluated"
    return summary + "\n" + "\n".join(details) + footer


CONNECT_ERROR = "cannot connect"


def _error_key(r: RunResult) -> tuple[str, str] | None:
    return (r.target, r.error or "") if r.status == "error" else None


def _repeated(results: Sequence[RunResult]) -> set[tuple[str, str]]:
    """Errors that several invariants of one target share: one cause, said once."""
    counts = Counter(k for r in results if (k := _error_key(r)) is not None)
    return {k for k, n in counts.items() if n > 1}


def _shared_errors(results: Sequence[RunResult], dsn_sources: str) -> list[str]:
    out = []
    for target, error in sorted(_repeated(results)):
        names = [printable(r.invariant) for r in results if _error_key(r) == (target, error)]
        where = "the database" if target == DEFAULT_TARGET else f"target {printable(target)}"
        if error.startswith(CONNECT_ERROR):
            head = (
                f"{where}: {CONNECT_ERROR}, so {len(names)} invariants could not be evaluated "
                f"(check the DSN: {dsn_sources})"
            )
        else:
            head = f"{len(names)} invariants could not be evaluated, all for one reason"
        out.append(f"\n{head}:\n    {printable(error)}\n    not evaluated: {', '.join(names)}")
    return out


def problems_text(problems: Sequence[Problem]) -> str:
    return "\n".join(str(p) for p in sorted(problems))


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else shown(moment, seconds=True)


def _handled(incident: Incident, mute: Mute | None = None) -> str:
    said = []
    if incident.acked_by:
        said.append(f"acked by {incident.acked_by_name or incident.acked_by}")
    elif incident.snoozed_until:
        said.append(f"snoozed to {_when(incident.snoozed_until)}")
    if mute is not None:
        # Its notifications wait for the mute's end, which the list of mutes below says.
        said.append(f"muted (#{mute.id})")
    return "; ".join(said)


def names_targets(targets: Iterable[str]) -> bool:
    """Whether a table needs a target column: once there is more than one database, or one
    with a name of its own, a finding must say which database it came from."""
    seen = set(targets)
    return len(seen) > 1 or seen - {DEFAULT_TARGET} != set()


def status_text(
    incidents: Sequence[Incident],
    runs: Sequence[Run],
    closed: Sequence[Incident] = (),
    muted: Mapping[int, Mute] = MappingProxyType({}),
) -> str:
    """Open incidents (each saying the mute that holds its notifications, `muted` by
    incident id), then those `closed` lately (resolved or retired, each saying which), then
    each invariant's last run."""
    several = names_targets([i.target for i in [*incidents, *closed]] + [r.target for r in runs])
    if incidents:
        open_table = text_table(
            [
                "incident",
                "invariant",
                *(["target"] if several else []),
                "kind",
                "opened",
                "count",
                "handled",
                "detail",
            ],
            [
                [
                    f"#{i.id}",
                    i.invariant,
                    *([i.target] if several else []),
                    i.kind,
                    _when(i.opened_at),
                    "-" if i.last_count is None else i.last_count,
                    _handled(i, muted.get(i.id)),
                    i.detail or "",
                ]
                for i in incidents
            ],
        )
        top = f"Open incidents ({len(incidents)}):\n{open_table}"
    else:
        top = "No open incidents."
    if closed:
        closed_table = text_table(
            ["incident", "invariant", *(["target"] if several else []), "kind", "state", "closed"],
            [
                [
                    f"#{i.id}",
                    i.invariant,
                    *([i.target] if several else []),
                    i.kind,
                    STATE_LABEL[i.state],
                    _when(i.resolved_at),
                ]
                for i in closed
            ],
        )
        top += f"\n\nClosed in the last day ({len(closed)}):\n{closed_table}"
    if not runs:
        return top + "\n\nNo runs recorded yet; start `invmon run`."
    run_table = text_table(
        [
            "invariant",
            *(["target"] if several else []),
            "last run",
            "status",
            "count",
            "duration",
            "error",
        ],
        [
            [
                r.invariant,
                *([r.target] if several else []),
                _when(r.finished_at),
                STATUS_LABEL[r.status],
                "-" if r.count is None else r.count,
                f"{r.duration_ms or 0:,.0f} ms",
                r.error or "",
            ]
            for r in runs
        ],
    )
    return f"{top}\n\nLast runs:\n{run_table}"


def history_text(title: str, runs: Sequence[Run], incidents: Sequence[Incident]) -> str:
    several = names_targets([i.target for i in incidents] + [r.target for r in runs])
    many = len({r.invariant for r in runs} | {i.invariant for i in incidents}) > 1
    who = (["invariant"] if many else []) + (["target"] if several else [])
    run_table = text_table(
        ["run", *who, "finished", "status", "count", "runs", "lag", "error"],
        [
            [
                f"#{r.id}",
                *([r.invariant] if many else []),
                *([r.target] if several else []),
                _when(r.finished_at),
                STATUS_LABEL[r.status],
                "-" if r.count is None else r.count,
                # A held stretch: its runs, from its first start (`finished` is its last's).
                r.repeats if r.repeats == 1 else f"{r.repeats} since {_when(r.started_at)}",
                "-" if r.replica_lag_seconds is None else f"{r.replica_lag_seconds:.0f}s",
                r.error or "",
            ]
            for r in runs
        ],
    )
    incident_table = text_table(
        ["incident", *who, "kind", "state", "opened", "closed", "first count", "last count"],
        [
            [
                f"#{i.id}",
                *([i.invariant] if many else []),
                *([i.target] if several else []),
                i.kind,
                STATE_LABEL[i.state],
                _when(i.opened_at),
                _when(i.resolved_at),
                i.first_count,
                i.last_count,
            ]
            for i in incidents
        ],
    )
    if not runs:
        run_table = "none yet (`invmon run` records runs; `invmon check` does not)"
    if not incidents:
        incident_table = "none"
    return f"{title}: recent runs\n{run_table}\n\nincidents\n{incident_table}"


def _md_cell(value: Any, of_a_row: bool = False) -> str:
    """A cell of a Markdown table. A row's value goes in a code span, whose content a
    renderer shows as it is: no emphasis, link or HTML of the data's (an <img> in a PR
    comment would be fetched), fenced by more backticks than it holds."""
    text = _cell(value, of_a_row=of_a_row)
    if of_a_row:
        fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
        pad = " " if text.startswith("`") or text.endswith("`") else ""
        text = f"{fence}{pad}{text}{pad}{fence}"
    return text.replace("|", "\\|")  # GitHub's tables split at a bare |, even in code


def _md_code(text: str, limit: int = 500) -> str:
    """A message in inline code, whole up to `limit`: a refusal must be readable in a PR."""
    flat = " ".join(text.replace("`", "'").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def results_markdown(results: Sequence[RunResult], problems: Sequence[Problem]) -> str:
    """A summary to paste into a pull request: counts, then a few rows of each violation."""
    held = sum(r.status == "ok" for r in results)
    violated = sum(r.status == "violated" for r in results)
    errored = sum(r.status == "error" for r in results)
    several = names_targets(r.target for r in results)
    lines = [
        f"### invmon: {held} held, {violated} violated, {errored} could not be evaluated",
        "",
        "| invariant |"
        + (" target |" if several else "")
        + " status | offending rows | duration |",
        "|---|" + ("---|" if several else "") + "---|---:|---:|",
    ]
    for r in results:
        count = "–" if r.count is None else f"{r.count:,}"
        target = f" {_md_cell(r.target)} |" if several else ""
        lines.append(
            f"| `{r.invariant}` |{target} {STATUS_LABEL[r.status].strip()} | {count} | "
            f"{r.duration_ms:,.0f} ms |"
        )
    for r in results:
        if r.status == "error":
            reason = _md_code(r.error or "")
            lines += ["", f"**`{r.invariant}`** could not be evaluated: `{reason}`"]
        elif r.status == "violated" and r.rows:
            shown = r.rows[:3]
            lines += [
                "",
                f"<details><summary><code>{r.invariant}</code>: first {len(shown)} "
                f"of {counted(r.count or 0, 'offending row')}</summary>",
                "",
            ]
            if r.columns:
                lines.append("| " + " | ".join(_md_cell(c) for c in r.columns) + " |")
                lines.append("|" + "---|" * len(r.columns))
                lines += [
                    "| " + " | ".join(_md_cell(row.get(c), True) for c in r.columns) + " |"
                    for row in shown
                ]
            else:
                lines.append("The query returns no columns: each row is empty.")
            lines += [f"_{note}_" for note in bounds_notes(r)]
            lines += ["", "</details>"]
    if problems:
        lines += ["", "Problems:", ""] + [f"- `{p}`" for p in problems]
    return "\n".join(lines)
