"""bench/results.json -> bench/README.md. Pure: `python bench/report.py` re-renders the README
from the last results without running anything again (bench/run.py runs and renders)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
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
    "claim_p99_ms": 100,
    "day_of_runs_gb": 1.0,
    "own_latency_p99_ms": 2000,
    "page_root_ms": 300,
    "healthz_p99_ms": 50,
}


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def before_commit(r: dict[str, Any], section: str) -> str:
    """Which invmon a section's "before" figures came from."""
    at = (r.get("previous_at") or {}).get(section)
    return str(at or (r.get("previous") or {}).get("commit", "?"))


def _fleet_before_after(r: dict[str, Any]) -> list[str]:
    """The fleet's store work beside the run before, configuration by configuration."""
    before = r.get("previous") or {}
    lines: list[str] = []
    if "fleet" in before and "fleet" in r:
        was = {(c["daemons"], c["invariants"]): c for c in before["fleet"]["configurations"]}
        pairs = [
            f"{c['daemons']} × {c['invariants']:,}: rows read per run "
            f"{was[k]['per_run']['tup_returned']:,.1f} → {c['per_run']['tup_returned']:,.1f}, "
            f"transactions per run {was[k]['per_run']['xact_commit']:.2f} → "
            f"{c['per_run']['xact_commit']:.2f}"
            for c in r["fleet"]["configurations"]
            if (k := (c["daemons"], c["invariants"])) in was
        ]
        if pairs:
            lines.append(
                f"The fleet, before (invmon at {before_commit(r, 'fleet')}) → now: "
                + "; ".join(pairs)
                + ".\n"
            )
    return lines


def _before_after(r: dict[str, Any]) -> list[str]:
    """The figures of the sections measured again, beside what the run before said."""
    before = r.get("previous") or {}
    lines = []
    if "startup" in before:
        b, a = before["startup"], r["startup"]
        lines.append(
            f"Start-up, before (invmon at {before_commit(r, 'startup')}) → now: "
            f"`import monitor.cli` {b['import_cli_s'] * 1000:.0f} → "
            f"{a['import_cli_s'] * 1000:.0f} ms"
            + (
                f", `--help` {b['help_s'] * 1000:.0f} → {a['help_s'] * 1000:.0f} ms, `lint` of "
                f"one file {b['lint_one_s'] * 1000:.0f} → {a['lint_one_s'] * 1000:.0f} ms.\n"
                if "help_s" in b and "lint_one_s" in b and "help_s" in a and "lint_one_s" in a
                else ".\n"
            )
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
            "One tick, paired median ratio to psql, before (invmon at "
            f"{before_commit(r, 'tick')}) → now: "
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


def _carried(r: dict[str, Any]) -> str:
    """Which sections were carried over, each dated by the run that measured it, and named
    by the machine it ran on when that is not this run's."""
    measured_at = r.get("measured_at") or {}
    fallback = r.get("carried_from") or {}
    groups: dict[tuple[str, str, str], list[str]] = {}
    for section in r["reused"]:
        was = measured_at.get(section) or fallback or {"commit": "?", "date": "?"}
        cpu = was.get("cpu") or fallback.get("cpu") or r["machine"]["cpu"]
        groups.setdefault((was["date"], was["commit"], cpu), []).append(section)
    said = "; ".join(
        f"{', '.join(sections)} (invmon at {commit}, {date}"
        + (f", on {cpu}" if cpu != r["machine"]["cpu"] else "")
        + ")"
        for (date, commit, cpu), sections in sorted(groups.items())
    )
    return f"Sections carried over from earlier runs rather than measured again: {said}.\n"


def _floor_of(tick: dict[str, Any], name: str) -> str:
    if name not in tick:
        return ""
    return f" (Python + psycopg alone, every row: {tick[name]['ratio_median']:.2f}×)"


def _floor_note(r: dict[str, Any]) -> str:
    """What a Python client pays for psql's own work, and invmon's share past it."""
    tick = {row["name"]: row for row in r["tick"]}
    if "psycopg_rows_c1" not in tick:
        return ""
    pairs = [
        (tick["invmon_c1"], tick["psycopg_rows_c1"], "concurrency 1"),
        (tick["invmon_c4"], tick["psycopg_rows_c4"], "concurrency 4"),
    ]
    shares = "; ".join(
        f"at {how}, the client {floor['ratio_median']:.2f} and invmon "
        f"{ours['ratio_median']:.2f} ({ours['ratio_median'] - floor['ratio_median']:+.2f} of "
        f"psql's time, {(ours['wall_median_s'] - floor['wall_median_s']) * 1000:+,.0f} ms "
        "in median walls)"
        for ours, floor, how in pairs
    )
    whole = tick.get("invmon_whole_c1")
    own = (
        f" Read whole (`database.keys_first: false`), invmon is {whole['ratio_median']:.2f} at "
        f"concurrency 1, {whole['ratio_median'] - tick['psycopg_rows_c1']['ratio_median']:+.2f}"
        " of psql's time past the client: that is its own overhead, which reading keys "
        "first does not change."
        if whole
        else ""
    )
    return (
        "\nThe two rows of Python + psycopg fetching every row are the floor of a Python "
        "client doing psql's work: the interpreter, psycopg and the fetch at concurrency 1; "
        "what four connections at once buy on this machine at concurrency 4. "
        f"{shares[0].upper()}{shares[1:]}. Past that floor, invmon spends time on its "
        "imports (configuration, the fence's parser), the fence's catalog questions and the "
        "statements around each bounded query; and it saves the server's work where it reads "
        "an invariant's keys first (docs/how-it-works.md): the context columns of "
        "duplicate_settled_refunds are computed for its sample's rows only, where psql and "
        f"the client compute them for each of 800,000 groups.{own}\n"
    )


def verdicts(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    tick = {row["name"]: row for row in r["tick"]}
    c1, c4 = tick["invmon_c1"], tick["invmon_c4"]
    rss = max(c1["peak_rss_mib"], c4["peak_rss_mib"])
    warm = r["scale"]["ticks"][-1]["cpu_ms_per_run"]
    ten_m = [m for m in r["rows_memory"] if m["rows"] == 10_000_000]
    rows = [
        (
            "`invmon check` ≤ 1.10× psql at concurrency 1",
            f"{c1['ratio_median']:.2f}×" + _floor_of(tick, "psycopg_rows_c1"),
            _met(c1["ratio_median"] <= TARGETS["c1_ratio"]),
        ),
        (
            "`invmon check` ≤ 0.85× psql at concurrency 4",
            f"{c4['ratio_median']:.2f}×" + _floor_of(tick, "psycopg_rows_c4"),
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
    return (
        rows
        + source_verdicts(r.get("sources"))
        + fleet_verdicts(r.get("fleet"))
        + latency_verdicts(r.get("latency"))
        + page_verdicts(r.get("page"))
    )


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


def _earlier(
    r: dict[str, Any], section: str, figures: Callable[[dict[str, Any]], str]
) -> list[str]:
    """The run before's figures of a section measured again, beside this run's."""
    before = (r.get("previous") or {}).get(section)
    if not before:
        return []
    return [
        f"Before (invmon at {before_commit(r, section)}) → now: "
        f"{figures(before)} → {figures(r[section])}.\n"
    ]


def fleet_summary(f: dict[str, Any]) -> str:
    return "; ".join(
        f"{c['daemons']}×{c['invariants']:,}: {c['per_run']['xact_commit']:.2f} transactions "
        f"per run, claim p99 {c['claim_roundtrip_ms']['p99']:.1f} ms, "
        f"{c['bytes_per_day'] / 1e9:.3f} GB a day"
        for c in sorted(f["configurations"], key=_fleet_key)
    )


def latency_summary(lat: dict[str, Any]) -> str:
    return f"own time p50 {lat['own_ms']['p50']:,.0f} ms, p99 {lat['own_ms']['p99']:,.0f} ms"


def page_summary(pg: dict[str, Any]) -> str:
    return (
        f"`/` {pg['root_ttfb_ms']['median']:,.0f} ms, detail "
        f"{pg['detail_ttfb_ms']['median']:,.0f} ms, /healthz p99 "
        f"{pg['load']['healthz_p99_ms']:.1f} ms"
        + ("" if "processes" in pg["load"] else " (load and probe in the server's process)")
    )


def _ms(d: dict[str, float]) -> str:
    return f"{d['p50']:,.0f} / {d['p99']:,.0f} ms"


def _fleet_key(c: dict[str, Any]) -> tuple[int, int]:
    return (c["invariants"], c["daemons"])


def _written(c: dict[str, Any]) -> float:
    db = c["store"]["db"]
    runs = c["invariants"] * c["window_min"]
    return float(db["tup_inserted"] + db["tup_updated"] + db["tup_deleted"]) / runs


def fleet_section(f: dict[str, Any]) -> list[str]:
    configs = sorted(f["configurations"], key=_fleet_key)
    out = ["## The fleet at scale\n"]
    out.append(
        "`bench/fleet.py`: daemon processes (`python -m monitor.cli run --config …`, one "
        "config each: the same PostgreSQL state store and ten targets, its own listener, "
        "`concurrency: 1` per target) over 10 target databases on the same server, each a "
        "1,000-row `items` table; every invariant an index lookup of one item, `schedule: "
        "every 1m`, spread over the targets by folder. After every invariant's first run and "
        f"one whole minute more, a window of {f['window_min']} whole minutes opens on a minute "
        "boundary. Checked before any figure is read: the runs stored for each of the "
        "window's slots `==` the number of invariants (and each slot's last run done within "
        "the minute), else the backlog is given.\n"
    )
    out.append(
        "| daemons | invariants | runs per slot (expected) | kept up | last run of a slot done "
        "after | store transactions per tick (per run) | rows written per run | rows read per "
        "run | table "
        "scans per run | claim round trip p50 / p99 | slot due → claimed p50 / p99 | CPU per "
        "daemon | RSS per daemon | machine busy (load) |"
    )
    out.append("|" + "---|" * 14)
    for c in configs:
        per_slot = ", ".join(f"{n:,}" for n in c["runs_per_slot"])
        done = ", ".join("–" if s is None else f"{s:.0f} s" for s in c["slot_done_after_s"])
        cpu = ", ".join(f"{v:.0f}%" for v in c["daemon_cpu_percent_of_core"])
        rss = ", ".join(f"{v:.0f}" for v in c["daemon_rss_mib"])
        kept = "yes" if c["kept_up"] else f"**no** (backlog {c['backlog_runs']:,} runs)"
        out.append(
            f"| {c['daemons']} | {c['invariants']:,} | {per_slot} ({c['expected_per_slot']:,}) "
            f"| {kept} | {done} | {c['per_tick']['xact_commit']:,.0f} "
            f"({c['per_run']['xact_commit']:.2f}) | {_written(c):.2f} | "
            f"{c['per_run']['tup_returned']:,.1f} | "
            f"{c['scans_per_run']:.2f} | {c['claim_roundtrip_ms']['p50']:.1f} / "
            f"{c['claim_roundtrip_ms']['p99']:.1f} ms | {_ms(c['claim_late_ms'])} | {cpu} of a "
            f"core | {rss} MiB | {c['machine_busy_percent']:.0f}% "
            f"({c['load_average'][0]:.1f}–{c['load_average'][1]:.1f}) |"
        )
    out.append(
        "\nStore work is read from the store database's own counters, without "
        "pg_stat_statements (it needs `shared_preload_libraries`, which the shared server "
        "does not have and which would need a restart): deltas over the window of "
        "`pg_stat_database` (transactions committed: each is one BEGIN … COMMIT of a daemon, "
        "so one round trip at least and usually three or more; rows inserted, updated and "
        "deleted) and of `pg_stat_user_tables` (index and sequential scans: about one per "
        "statement reading a table). The claim round trip is the daemon's own claim "
        "(`Claims.claim`: one transaction, its INSERT … ON CONFLICT DO NOTHING) timed by a "
        "probe in the bench process ten times a second on the loaded store, its transactions "
        "taken out of the counts; slot due → claimed is each claim row's `claimed_at` less "
        "its slot plus its stable jitter, so it includes the wait for the scheduler's tick "
        "(and, for a slot its preferred daemon left, the others' five-second handoff). CPU is "
        "user + system over the window (/proc/PID/stat), RSS the daemon's VmRSS at its end.\n"
    )
    for c in configs:
        tables = c["store"]["tables"]
        runs = c["invariants"] * c["window_min"]
        parts = ", ".join(
            f"{name} {(t['idx_scan'] + t['seq_scan']) / runs:.2f}"
            + (f" ({t['seq_scan'] / runs:.2f} sequential)" if t["seq_scan"] else "")
            for name, t in sorted(tables.items(), key=lambda kv: -kv[1]["idx_scan"])
            if t["idx_scan"] + t["seq_scan"]
        )
        out.append(
            f"Table scans per run, {c['daemons']} daemon(s) × {c['invariants']:,}: {parts}.\n"
        )
    big = max(configs, key=lambda c: (c["invariants"], c["daemons"]))  # as the verdict
    b = big["bytes_per_row"]
    per = big["runs_rows_per_run"]
    bound = big["bytes_bounded"]
    out.append(
        "The store's size. Runs that held one after another are one `runs` row, a held "
        "stretch that closes an hour after its first run (monitor/store/stretches.py): over "
        f"the window each run inserted {per['inserted']:.3f} `runs` rows and updated "
        f"{per['updated']:.3f} ({big['daemons']} daemon(s) × {big['invariants']:,}). A "
        f"`runs` row is {b.get('runs', 0):,.0f} bytes and a `slot_claims` row "
        f"{b.get('slot_claims', 0):,.0f} (heap, indexes and TOAST over rows, after VACUUM "
        "FULL). A day of runs every minute, every invariant holding, keeps "
        f"{big['bytes_per_day_note']} = {big['bytes_per_day'] / 1e9:.3f} GB, "
        f"{30 * big['bytes_per_day'] / 1e9:.1f} GB at 30 days' retention ("
        + "; ".join(
            f"{c['daemons']} daemon(s) × {c['invariants']:,}: {c['bytes_per_day'] / 1e9:.3f} GB"
            for c in configs
        )
        + "). Bounded, not growing by the day: finished claims, pruned an hour after their "
        f"slot by a job every ten minutes (at most {bound['slot_claims'] / 1e6:,.0f} MB here), "
        "and the dead row versions that the updates leave until vacuum takes them "
        f"({bound['dead_versions'] / 1e6:,.0f} MB as the window left them). An invariant "
        "that finds rows on every run keeps every run, a row each, as before.\n"
    )
    out.append(
        "Measured by bench/run.py's `fleet` section, or alone by `python bench/fleet.py "
        "--dsn DSN --runs 1:5000,3:5000,3:2500 --window 2`.\n"
    )
    return out


def fleet_verdicts(f: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    if not f:
        return []
    configs = {(c["daemons"], c["invariants"]): c for c in f["configurations"]}
    rows: list[tuple[str, str, str]] = []
    largest = max(n for _, n in configs)
    one, many = (
        configs.get((1, largest)),
        max(
            (c for c in configs.values() if c["invariants"] == largest), key=lambda c: c["daemons"]
        ),
    )
    if one is not None and many is not one:
        ratio = many["per_run"]["xact_commit"] / one["per_run"]["xact_commit"]
        smaller = [
            c
            for c in configs.values()
            if c["daemons"] == many["daemons"] and c["invariants"] < largest
        ]
        across = ""
        linear = ratio <= many["daemons"]
        if smaller:
            s = smaller[0]
            drift = s["per_run"]["xact_commit"] / many["per_run"]["xact_commit"]
            across = (
                f"; at {s['invariants']:,} invariants {s['per_run']['xact_commit']:.2f} per run "
                f"({drift:.2f}× the per-run work at {largest:,})"
            )
            linear = linear and 0.8 <= drift <= 1.25
            # Rows read per run, too: a statement whose reads grow with the slots due at once
            # keeps its transaction count and still makes the store's work quadratic.
            read_drift = s["per_run"]["tup_returned"] / many["per_run"]["tup_returned"]
            linear = linear and 0.5 <= read_drift <= 2
        read_one, read_many = one["per_run"]["tup_returned"], many["per_run"]["tup_returned"]
        linear = linear and read_many <= 2 * many["daemons"] * read_one
        rows.append(
            (
                "store work linear in due slots, not in the fleet's size squared",
                f"transactions per run {one['per_run']['xact_commit']:.2f} (1 daemon) → "
                f"{many['per_run']['xact_commit']:.2f} ({many['daemons']} daemons), "
                f"{ratio:.2f}×{across}; rows read per run {read_one:,.1f} → {read_many:,.1f}",
                _met(linear),
            )
        )
    rows.append(
        (
            "p99 claim < 100 ms",
            f"claim round trip p99 {many['claim_roundtrip_ms']['p99']:.1f} ms "
            f"({many['daemons']} daemons × {largest:,}); slot due → claimed p99 "
            f"{many['claim_late_ms']['p99']:,.0f} ms (the scheduler's tick included)",
            _met(many["claim_roundtrip_ms"]["p99"] < TARGETS["claim_p99_ms"]),
        )
    )
    gb = many["bytes_per_day"] / 1e9
    rows.append(
        (
            "a day of runs < 1 GB",
            f"{gb:.3f} GB at {largest:,} invariants every minute, all holding (claims bounded "
            f"at {many['bytes_bounded']['slot_claims'] / 1e6:,.0f} MB)",
            _met(gb < TARGETS["day_of_runs_gb"]),
        )
    )
    kept = [c for c in configs.values() if c["kept_up"]]
    rows.append(
        (
            f"{largest:,} invariants every minute keep up on 2 cores",
            ", ".join(
                f"{c['daemons']} daemon(s): "
                + ("yes" if c["kept_up"] else f"backlog {c['backlog_runs']:,}")
                for c in sorted(configs.values(), key=lambda c: c["daemons"])
                if c["invariants"] == largest
            ),
            _met(all(c["kept_up"] for c in configs.values() if c["invariants"] == largest)),
        )
    )
    if not all(c["kept_up"] for c in configs.values()) and kept:
        best = max(kept, key=lambda c: c["invariants"])
        rows[-1] = (rows[-1][0], rows[-1][1] + f"; kept up at {best['invariants']:,}", rows[-1][2])
    return rows


def latency_section(lat: dict[str, Any]) -> list[str]:
    out = ["## From a committed violation to the Slack message\n"]
    out.append(
        f"`bench/latency.py`: {lat['trials']} trials, {lat['lanes']} invariants side by side "
        f"(`schedule: {lat['schedule']}`, each its own channel) in the real daemon "
        "(`assemble`: scheduler, workers, alerts thread; a PostgreSQL state store) watching "
        "the hot standby of a real streaming pair (tests/standby.py), Slack the fake Web API "
        f"with its per-channel limit ({lat['rate_per_second']:g} post a second, burst "
        f"{lat['burst']}). A trial commits the violating row on the primary, notes when the "
        "standby shows it (the replica lag), and waits for the incident's root message; then "
        "it commits the fix and waits for the incident to resolve. Checked: one incident and "
        f"one root message per trial ({lat['checks']['trials']} trials; 429s "
        f"{lat['checks']['rate_limited']}). Slot due is the run's slot plus its stable "
        "jitter (what the scheduler waits for); invmon's own time is the root's post less "
        "the later of the slot being due and the row being on the standby.\n"
    )
    out.append("| | p50 | p99 | min–max |")
    out.append("|---|---|---|---|")
    for label, key in (
        ("replica lag (commit on the primary → visible on the standby)", "lag_ms"),
        ("commit on the primary → root message posted", "commit_to_root_ms"),
        ("slot due → root message posted", "due_to_root_ms"),
        ("invmon's own time (past the schedule and the lag)", "own_ms"),
    ):
        v = lat[key]
        out.append(
            f"| {label} | {v['p50']:,.0f} ms | {v['p99']:,.0f} ms | "
            f"{v['min']:,.0f}–{v['max']:,.0f} ms |"
        )
    parts = lat.get("parts_ms") or {}
    names = {
        "due_to_started": "slot due → run started (the scheduler's tick)",
        "run": "the run (replica gate, query, stored)",
        "stored_to_planned": "run stored → alert planned (the alerts turn, and the digest's "
        "hold while a burst may be arriving)",
        "planned_to_root": "planned → accepted by Slack",
    }
    for key, label in names.items():
        if key in parts:
            v = parts[key]
            out.append(
                f"| {label} | {v['p50']:,.0f} ms | {v['p99']:,.0f} ms | "
                f"{v['min']:,.0f}–{v['max']:,.0f} ms |"
            )
    out.append(
        f"\nThe parts are from the store's own timestamps (the run's start and end, the root "
        f"delivery's creation). Machine load average at the end: {lat['load_average']:.1f}. "
        "Measured by bench/run.py's `latency` section, or alone by `python bench/latency.py "
        "--dsn DSN --trials 100`.\n"
    )
    return out


def latency_verdicts(lat: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    if not lat:
        return []
    own = lat["own_ms"]
    return [
        (
            "violation → Slack: p99 < 2 s of invmon's own time past the schedule and the lag",
            f"p99 {own['p99']:,.0f} ms (p50 {own['p50']:,.0f}; lag p99 "
            f"{lat['lag_ms']['p99']:.1f} ms)",
            _met(own["p99"] < TARGETS["own_latency_p99_ms"]),
        )
    ]


def page_section(pg: dict[str, Any]) -> list[str]:
    c = pg["checks"]
    load = pg["load"]
    out = ["## The page at 1,000 invariants × 30 days of runs\n"]
    out.append(
        f"`bench/page.py`: a PostgreSQL state store with {pg['invariants']:,} invariants "
        f"(bench/scale.py's files) and {pg['days']} days of 15-minute runs, "
        f"{c['runs']:,} runs ({pg['runs_each']:,} each), built in {pg['fill_s']:.0f} s by one "
        "`INSERT … SELECT` over `unnest(names) × generate_series(slots)` in PostgreSQL, then "
        "ANALYZE; each invariant's newest run stored through `StateStore.record_run` (the "
        "daemon's path: its state, and the incidents of the one in ten violated). Store "
        f"{pg['store_bytes'] / 2**20:,.0f} MiB. Checked before timing: runs `==` "
        f"{c['runs_expected']:,}, every invariant {pg['runs_each']:,}, open incidents "
        f"{c['open_incidents']} `==` {c['open_expected']}, `/` lists "
        f"{c['listed_on_page']:,} invariants. Served as the tests serve it: StatusPage behind "
        "the daemon's listener (waitress) on 127.0.0.1, its cache clock moved past "
        "CACHE_SECONDS before each timed request, so each is a cold build; time to first byte "
        f"over a fresh connection, {pg['repeat']} of each, interleaved.\n"
    )
    out.append("| request | time to first byte, median (min–max) | whole response, median |")
    out.append("|---|---|---|")
    for label, first, whole in (
        ("`/`, cold", "root_ttfb_ms", "root_whole_ms"),
        (f"`{pg['detail_path']}`, cold", "detail_ttfb_ms", "detail_whole_ms"),
    ):
        f, w = pg[first], pg[whole]
        out.append(
            f"| {label} | {f['median']:,.0f} ms ({f['min']:,.0f}–{f['max']:,.0f}) | "
            f"{w['median']:,.0f} ms |"
        )
    cached = pg["root_cached_ttfb_ms"]
    out.append(
        f"| `/` again right after the detail page, its HTML built again but the store's "
        f"overview (read once per CACHE_SECONDS for all pages) still fresh | "
        f"{cached['median']:,.0f} ms ({cached['min']:,.0f}–{cached['max']:,.0f}) | |"
    )
    statuses = ", ".join(f"{k}: {v:,}" for k, v in load["pages_by_status"].items())
    out.append(
        f"\n/healthz while {load['threads']} client threads fetch pages for "
        f"{load['seconds']:.0f} s (`/` and detail pages of random invariants and windows, "
        f"mostly cache misses; {load['pages_fetched']:,} answered, by status {statuses}: a "
        "503 is the page's own limit on builds at once, answered at once): p50 "
        f"{load['healthz_p50_ms']:.1f} ms, p99 {load['healthz_p99_ms']:.1f} ms, max "
        f"{load['healthz_max_ms']:.1f} ms over {load['healthz_n']:,} requests "
        f"({load['healthz_failed']} failed)"
        + (
            "; the clients and the probe each in a process of their own, as a daemon's are"
            if "processes" in load
            else "; the clients and the probe in the bench's process, sharing the server's GIL"
        )
        + f". Machine load average at the end: {pg['load_average']:.1f}.\n"
    )
    out.append(
        "Measured by bench/run.py's `page` section, or alone by `python bench/page.py --dsn "
        "DSN --invariants 1000 --days 30`.\n"
    )
    return out


def page_verdicts(pg: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    if not pg:
        return []
    root, load = pg["root_ttfb_ms"], pg["load"]
    return [
        (
            "`/` at 1,000 invariants × 30 days < 300 ms",
            f"{root['median']:,.0f} ms time to first byte, cold (max {root['max']:,.0f})",
            _met(root["median"] < TARGETS["page_root_ms"]),
        ),
        (
            "/healthz p99 < 50 ms while 8 clients fetch pages",
            f"{load['healthz_p99_ms']:.1f} ms (p50 {load['healthz_p50_ms']:.1f})",
            _met(load["healthz_p99_ms"] < TARGETS["healthz_p99_ms"]),
        ),
    ]


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
        out.append(_carried(r))
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
    out.append(_floor_note(r))
    server = r["profile"]["server_ms"]
    out.append(
        "The server's own execution time of the four queries (EXPLAIN ANALYZE, best of 3): "
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
        "order, long values cut on the server), or its keys read first where the planner "
        "expects that no costlier (duplicate_settled_refunds: its context columns computed "
        "for the sample's rows only), plus its transaction, the fence's catalog questions, "
        "the row description and the plans; the difference also holds run-to-run noise of "
        "the queries themselves.\n"
    )
    counted = r.get("instructions")
    if counted:
        earlier = (r.get("previous") or {}).get("instructions") or {}

        def figure(name: str) -> str:
            now = f"{counted[name] / 1e6:,.0f}M"
            return f"{earlier[name] / 1e6:,.0f}M → {now}" if name in earlier else now

        out.append(
            "Instructions of invmon's own process for one `invmon check` (valgrind's callgrind; "
            "a busy machine does not move them as it moves wall times; the database's work is "
            f"not counted): one trivial invariant {figure('trivial')}, the four shipped at "
            f"concurrency 1 {figure('four_shipped')}"
            + (f" (invmon at {before_commit(r, 'instructions')} → now)" if earlier else "")
            + ".\n"
        )
        parts = counted.get("parts")
        if parts:
            own = counted["four_shipped"] - counted["floor"]
            out.append(
                "Where the four shipped ones' instructions go past the floor's (Python + psycopg "
                f"fetching every row, 1 connection: {counted['floor'] / 1e6:,.0f}M): a library's "
                "own is what importing all of them costs less what it costs without that one.\n"
            )
            out.append("| part of `invmon check` past the floor | instructions | share |")
            out.append("|---|---|---|")
            for name, count in sorted(parts.items(), key=lambda kv: -kv[1]):
                out.append(f"| {name} | {count / 1e6:,.0f}M | {count / own:.0%} |")
            out.append(f"| invmon's own, in all | {own / 1e6:,.0f}M | 100% |\n")
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
    if r.get("fleet"):
        out += fleet_section(r["fleet"]) + _fleet_before_after(r)
        out += _earlier(r, "fleet", fleet_summary)
    if r.get("latency"):
        out += latency_section(r["latency"])
        out += _earlier(r, "latency", latency_summary)
    if r.get("page"):
        out += page_section(r["page"])
        out += _earlier(r, "page", page_summary)
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
