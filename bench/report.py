"""bench/results.json -> bench/README.md. Pure: `python bench/report.py` re-renders the README
from the last results without running anything again (bench/run.py runs and renders)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent

# The targets; each line of the README's verdict table is computed from results.
TARGETS = {
    "c1_ratio": 1.10,
    "c4_ratio": 0.85,
    "check_rss_mib": 64,
    "load_1000_s": 1.0,
    "own_ms_per_run": 2.0,
    "idle_cpu_percent": 1.0,
    "idle_rss_mib": 80,
    "ten_million_rss_mib": 150,
    "source_to_plain_rss": 1.2,  # at 100,000 objects
    "million_objects_rss_mb": 300,
}


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _before_after(r: dict[str, Any]) -> list[str]:
    """The figures of the sections measured again, beside what the run before said."""
    before = r.get("previous") or {}
    lines = []
    if "startup" in before:
        b, a = before["startup"], r["startup"]
        lines.append(
            f"Before (invmon at {before['commit']}): every command imported everything, "
            f"{b['import_cli_s'] * 1000:.0f} ms for `import monitor.cli`; now "
            f"{a['import_cli_s'] * 1000:.0f} ms for the command line and, whole commands, "
            f"`--help` {a.get('help_s', 0) * 1000:.0f} ms, `lint` of one file "
            f"{a.get('lint_one_s', 0) * 1000:.0f} ms.\n"
        )
    if "tick" in before:
        b = {row["name"]: row for row in before["tick"]}
        a = {row["name"]: row for row in r["tick"]}
        pairs = [
            f"{a[n]['label']} {b[n]['ratio_median']:.2f} → {a[n]['ratio_median']:.2f}"
            for n in ("invmon_c1", "invmon_c4")
            if n in a and n in b
        ]
        gone = sorted(set(b) - set(a))
        lines.append(
            f"One tick, paired median ratio to psql, before (invmon at {before['commit']}) → "
            "now: "
            + "; ".join(pairs)
            + "."
            + (f" Not run again this time: {', '.join(gone)} (see the run before)." if gone else "")
            + "\n"
        )
    paired = r.get("paired_before_after")
    if paired:
        lines.append(
            f"Before and after measured together ({paired['note']}): "
            + "; ".join(
                f"{name} {v[0]:.2f} ({v[1]:.2f}–{v[2]:.2f}) → {v[3]:.2f} ({v[4]:.2f}–{v[5]:.2f})"
                for name, v in paired["rows"].items()
            )
            + f". Start-up ({paired['startup_note']}): "
            + "; ".join(f"`{k}` {a} ms → {b} ms" for k, (a, b) in paired["startup_ms"].items())
            + ".\n"
        )
    return lines


def verdicts(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    tick = {row["name"]: row for row in r["tick"]}
    c1, c4 = tick["invmon_c1"], tick["invmon_c4"]
    rss = max(c1["peak_rss_mib"], c4["peak_rss_mib"])
    warm = r["scale"]["ticks"][-1]["cpu_ms_per_run"]
    ten_m = [m for m in r["rows_memory"] if m["rows"] == 10_000_000]
    rows = [
        (
            "`invmon check` ≤ 1.10× psql at concurrency 1",
            f"{c1['ratio_median']:.2f}×",
            _met(c1["ratio_median"] <= TARGETS["c1_ratio"]),
        ),
        (
            "`invmon check` ≤ 0.85× psql at concurrency 4",
            f"{c4['ratio_median']:.2f}×",
            _met(c4["ratio_median"] <= TARGETS["c4_ratio"]),
        ),
        (
            "`invmon check` peak RSS ≤ 64 MiB",
            f"{rss:.0f} MiB",
            _met(rss <= TARGETS["check_rss_mib"]),
        ),
        (
            "1,000 invariant files loaded and validated < 1 s",
            f"{r['scale']['load_s']:.2f} s "
            f"(reload of unchanged files {r['scale']['reload_s']:.3f} s)",
            _met(r["scale"]["load_s"] < TARGETS["load_1000_s"]),
        ),
        (
            "invmon's own time per run < 2 ms at 1,000 invariants",
            f"{warm:.2f} ms CPU per run "
            f"(first tick {r['scale']['ticks'][0]['cpu_ms_per_run']:.2f})",
            _met(warm < TARGETS["own_ms_per_run"]),
        ),
        (
            "idle daemon < 1% of a core and < 80 MiB",
            f"{r['idle']['cpu_percent_of_core']:.2f}% of a core, {r['idle']['rss_mib']:.0f} MiB",
            _met(
                r["idle"]["cpu_percent_of_core"] < TARGETS["idle_cpu_percent"]
                and r["idle"]["rss_mib"] < TARGETS["idle_rss_mib"]
            ),
        ),
    ]
    if ten_m:
        rows.append(
            (
                "≤ 150 MB at 10M offending rows",
                f"{ten_m[0]['peak_rss_mib']:.0f} MiB",
                _met(ten_m[0]["peak_rss_mib"] <= TARGETS["ten_million_rss_mib"]),
            )
        )
    return rows + source_verdicts(r.get("sources"))


def _source_runs(size: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    runs = {run["name"]: run for run in size["runs"]}
    return runs["invmon"], runs["plain"]


def source_verdicts(s: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    for size in (s or {}).get("sizes", []):
        invmon, plain = _source_runs(size)
        if size["objects"] == 100_000:
            ratio = invmon["peak_rss_mib"] / plain["peak_rss_mib"]
            rows.append(
                (
                    f"a source of 100,000 objects ({size['kind']}): `invmon check` peak RSS "
                    "≤ 1.2× the plain script's",
                    f"{ratio:.2f}× ({invmon['peak_rss_mib']:.0f} against "
                    f"{plain['peak_rss_mib']:.0f} MiB)",
                    _met(ratio <= TARGETS["source_to_plain_rss"]),
                )
            )
        if size["objects"] == 1_000_000:
            mb = invmon["peak_rss_mib"] * 1.048576
            rows.append(
                (
                    f"a source of 1,000,000 objects ({size['kind']}): `invmon check` < 300 MB",
                    f"{mb:.0f} MB ({invmon['peak_rss_mib']:.0f} MiB)",
                    _met(mb < TARGETS["million_objects_rss_mb"]),
                )
            )
    return rows


def sources_section(s: dict[str, Any]) -> list[str]:
    out = ["## A source listing bound into the query\n"]
    before = f", and invmon as it was at {s['before']}" if s.get("before") else ""
    out.append(
        "`bench/sources.py`: the live receipts invariant (examples/live) with its `source:` "
        "pointed at a store of n objects, against n invoices (one in "
        f"{s['every']:,} of each kind breaking it), run by `invmon check` and by the plainest "
        "alternative, a script listing the store into a Python set, reading the invoices' keys "
        f"into a Counter and comparing them{before}. The S3 store is moto's server "
        "(as the tests use it) on the same machine; a million objects are a folder, since "
        "moto sorts a bucket's every key for each page it returns (a million-object listing "
        "would take most of an hour and measure moto). Before anything is timed the store is "
        "listed and the invoices counted (`==` the plan); every run's counts are compared "
        f"with the plan too. {s['rounds']} rounds in rotating order: the highest peak RSS "
        "(GNU time's `%M`) and median times; listing and query times are each tool's own "
        "(invmon's `listing_ms`, and the rest of its `duration_ms`: the query, its fence and "
        "its row description).\n"
    )
    out.append("| store | objects | run | peak RSS | wall | listing | query |")
    out.append("|---|---|---|---|---|---|---|")
    for size in s["sizes"]:
        expected = ", ".join(f"{k} {v:,}" for k, v in size["expected"].items())
        for run in size["runs"]:
            label = {"plain": "plain script (sets)", "invmon": "`invmon check`"}.get(
                run["name"], f"`invmon check` at {s.get('before', '')} (before)"
            )
            out.append(
                f"| {size['kind']} ({expected}) | {size['objects']:,} | {label} | "
                f"{run['peak_rss_mib']:.0f} MiB | {run['wall_median_s']:.1f} s | "
                f"{run['listing_median_ms'] / 1000:.1f} s | {run['query_median_ms'] / 1000:.2f} s |"
            )
    out.append(
        "\nMeasured by bench/run.py's `sources` section, or alone by `python bench/sources.py "
        "--dsn DSN --objects 100000 --folder-objects 1000000 --before REF`. "
        "Commands of each run, exactly:\n"
    )
    out.append("```")
    for name, command in s["commands"].items():
        out.append(f"# {name}\n{command}")
    out.append("```\n")
    return out


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def delivery_section(d: dict[str, Any]) -> list[str]:
    configs = d["configurations"]
    out = ["## Delivery under Slack's rate limit\n"]
    out.append(
        f"`bench/delivery.py`: {d['incidents']} incidents open at once in the real daemon "
        f"(scheduler, alerts job, ledger) against the fake Slack limiting chat.postMessage to "
        f"{d['rate_per_second']:g} per second per channel with a burst of {d['burst']} (a 429 "
        "with Retry-After past it). Times are from the daemon's start.\n"
    )
    out.append("| | " + " | ".join(c["config"] for c in configs) + " |")
    out.append("|---|" + "---|" * len(configs))
    rows = [
        ("incidents opened", lambda c: f"{c['opened_first_s']:.1f}–{c['opened_last_s']:.1f} s"),
        ("every incident visible in the channel", lambda c: _s(c["all_roots_s"])),
        ("every incident's own message (with buttons)", lambda c: _s(c["all_own_messages_s"])),
        ("everything delivered, CSVs included", lambda c: _s(c["all_delivered_s"])),
        ("top-level messages / all posts", lambda c: f"{c['top_level']} / {c['posts']}"),
        (
            "digests (incidents each)",
            lambda c: ", ".join(str(g["incidents"]) for g in c["digests"]) or "none",
        ),
        (
            "chat.postMessage requests / 429s",
            lambda c: f"{c['post_requests']:,} / {c['rate_limited']:,}",
        ),
        ("retried before Retry-After", lambda c: str(c["early_retries"])),
        ("most calls for one delivery", lambda c: str(c["max_attempts"])),
        (
            "exactly once (no key twice, one CSV each)",
            lambda c: "yes" if c["exactly_once"] else "**no**",
        ),
    ]
    for label, cell in rows:
        out.append(f"| {label} | " + " | ".join(cell(c) for c in configs) + " |")
    out.append(
        "\nThe floor is the limit itself: every post (roots, digests and the replies that "
        "carry each incident's buttons) shares the channel's one post per second. The digest "
        "does not make delivery shorter; it makes the channel readable (two top-level "
        "messages instead of one per incident) and shows every incident within seconds.\n"
    )
    return out


def render(r: dict[str, Any]) -> str:
    m, shape, out = r["machine"], r["shape"], []
    out.append("# invmon benchmarks\n")
    out.append(
        "Generated by `python bench/run.py --dsn postgresql://postgres@127.0.0.1:5432/postgres` "
        "(about 15 minutes, plus a one-time data build and peer install); "
        "`python bench/report.py` re-renders this page from `bench/results.json`. "
        "Never part of the test suite: figures depend on the machine.\n"
    )
    if r.get("reused"):
        was = r.get("carried_from")
        out.append(
            "Sections carried over from the previous run rather than measured again"
            + (f" (invmon at {was['commit']}, {was['date']})" if was else "")
            + ": "
            + ", ".join(r["reused"])
            + ".\n"
        )
    out.append("## Machine\n")
    out.append(
        f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; PostgreSQL {m['postgresql']} "
        f"(jit {m['jit']}, defaults otherwise) on the same machine; Python {m['python']}; "
        f"invmon at {m['commit']}; {m['date']}.\n"
    )
    out.append("## Data\n")
    out.append(
        f"`bench/data.py`, scale {shape['scale']:g}, one row in {shape['every']:,} of each kind "
        "breaking its invariant: 100k accounts, 2M ledger rows, 800k disputes, 1M refunds, "
        "200k jobs, 300k invoices and their receipt objects (at scale 1). Before anything is "
        "timed, each shipped invariant's rows are counted and compared (`==`) with what the "
        "generator's rules say: "
        + ", ".join(f"{k} {v:,}" for k, v in r["expected"].items())
        + ". Every timed run below is checked against the same counts.\n"
    )
    out.append("## One tick of the four shipped invariants, side by side\n")
    out.append(
        "Each round runs every tool once, in a rotating order; each wall time is divided by "
        "psql's in the same round, and the median of those paired ratios is shown (min–max in "
        "brackets). Peak RSS is the process's own (GNU time's `%M`).\n"
    )
    out.append("| run | wall, ratio to psql (paired median) | median wall | peak RSS |")
    out.append("|---|---|---|---|")
    for row in sorted(r["tick"], key=lambda x: x["ratio_median"]):
        out.append(
            f"| {row['label']} | {row['ratio_median']:.2f} ({row['ratio_min']:.2f}–"
            f"{row['ratio_max']:.2f}) | {row['wall_median_s']:.2f} s | "
            f"{row['peak_rss_mib']:.0f} MiB |"
        )
    server = r["profile"]["server_ms"]
    out.append(
        "\nThe server's own execution time of the four queries (EXPLAIN ANALYZE, best of 3): "
        + ", ".join(f"{k} {v:,.0f} ms" for k, v in server.items())
        + f"; {sum(server.values()) / 1000:.2f} s in all.\n"
    )
    out.append("Commands, exactly:\n")
    out.append("```")
    for name, command in r["commands"].items():
        out.append(f"# {name}\n{command}")
    out.append("```\n")
    s = r["startup"]
    out.append("## Start-up and where a tick's time goes\n")
    if "help_s" in s:
        out.append(
            f"`python -c pass` {s['python_bare_s'] * 1000:.0f} ms; `import psycopg` "
            f"{s['import_psycopg_s'] * 1000:.0f} ms; `import monitor.cli.commands` (what every "
            f"command pays) {s['import_cli_s'] * 1000:.0f} ms; `invmon --help` "
            f"{s['help_s'] * 1000:.0f} ms; `invmon lint` of one shipped invariant "
            f"{s['lint_one_s'] * 1000:.0f} ms (medians of 7, 15 and 15 fresh processes"
            + (", bytecode cached as an install has it" if s.get("bytecode_cached") else "")
            + "). A command imports its own module only (monitor/cli/commands.py): `--help` "
            "loads no command, `lint` loads the loader and the fence but no database driver, "
            "Slack client, scheduler or web page (tests/cli/test_startup.py). What `invmon "
            "check` imports (`python -X importtime`, cumulative ms): "
            + ", ".join(f"{k} {v:.0f}" for k, v in s["imports_ms"].items())
            + ".\n"
        )
    else:
        out.append(
            f"`python -c pass` {s['python_bare_s'] * 1000:.0f} ms; `import psycopg` "
            f"{s['import_psycopg_s'] * 1000:.0f} ms; `import monitor.cli` (what every command "
            f"pays) {s['import_cli_s'] * 1000:.0f} ms (medians of 7). The largest imports "
            "(`python -X importtime`, cumulative ms): "
            + ", ".join(f"{k} {v:.0f}" for k, v in s["imports_ms"].items())
            + ".\n"
        )
    out += _before_after(r)
    p = r["profile"]
    out.append(
        "One tick in-process at concurrency 1 "
        f"(total {p['total_s']:.2f} s, of which imports {p['import_s']:.2f} s):\n"
    )
    out.append("| invariant | invmon's run | server execution (verbatim query) | difference |")
    out.append("|---|---|---|---|")
    for name, ms in p["runs"].items():
        server_ms = server.get(name, 0.0)
        out.append(f"| {name} | {ms:,.0f} ms | {server_ms:,.0f} ms | {ms - server_ms:+,.0f} ms |")
    out.append(
        "\ninvmon's run is the bounded query (exact `count(*) OVER ()`, the sample in key "
        "order, long values cut on the server) plus its transaction, the fence's catalog "
        "questions and the row description; the difference also holds run-to-run noise of the "
        "queries themselves.\n"
    )
    sc = r["scale"]
    out.append("## 1,000 invariants\n")
    out.append(
        f"`bench/scale.py` writes 1,000 index-lookup invariants over the same data (one in ten "
        f"violated). Loaded and validated in {sc['load_s']:.2f} s (median of five fresh "
        f"processes: {', '.join(f'{x:.2f}' for x in sc.get('load_runs_s', []))}; a reload of the "
        f"unchanged folder: {sc['reload_s']:.3f} s, parsed files are kept by content); "
        f"`invmon lint` of the folder, process included: {sc['lint_s']:.2f} s.\n"
    )
    out.append("| tick (concurrency 8) | runs | wall | runs per second | invmon's CPU per run |")
    out.append("|---|---|---|---|---|")
    for i, t in enumerate(sc["ticks"], start=1):
        what = "first (every text parsed and judged)" if i == 1 else "next (warm)"
        out.append(
            f"| {what} | {t['runs']:,} ({t['violated']} violated) | {t['wall_s']:.2f} s | "
            f"{t['runs_per_s']:.0f} | {t['cpu_ms_per_run']:.2f} ms |"
        )
    out.append(
        "\ninvmon's own time is measured as the process's CPU time divided by runs (time not "
        "spent in the database); the first tick also parses and judges every text once.\n"
    )
    i = r["idle"]
    out.append(
        f"Idle daemon (the four shipped invariants, after its first tick, over "
        f"{i['window_s']:.0f} s): {i['cpu_percent_of_core']:.2f}% of one core, RSS "
        f"{i['rss_mib']:.0f} MiB.\n"
    )
    out.append("| offending rows | peak RSS of `invmon check` | wall |")
    out.append("|---|---|---|")
    for row in r["rows_memory"]:
        out.append(f"| {row['rows']:,} | {row['peak_rss_mib']:.0f} MiB | {row['wall_s']:.1f} s |")
    out.append("")
    d = r.get("delivery")
    if d:  # absent when run with --incidents 0
        out += delivery_section(d)
    if r.get("sources"):
        out += sources_section(r["sources"])
    out.append("## Targets\n")
    out.append("| target | measured | |")
    out.append("|---|---|---|")
    out += [f"| {t} | {v} | {ok} |" for t, v, ok in verdicts(r)]
    out.append("")
    return "\n".join(out) + "\n"


def main() -> None:
    results = json.loads((BENCH / "results.json").read_text())
    (BENCH / "README.md").write_text(render(results))


if __name__ == "__main__":
    sys.exit(main())
