"""Run invmon's invariants with peer tools (dbt, Soda Core, SQL Sentinel) for the benchmark.

Standard library only: bench/run.py imports this module. Each peer gets its own venv (their
dependencies conflict) under $INVMON_BENCH_CACHE/peers/<peer>, by default
~/.cache/invmon-bench/peers/<peer>, installed from pinned versions plus the constraints file
(a pip freeze of a venv that was verified) in bench/peers/<peer>/.

For each run, prepare() writes the peer's project into a work directory with the invariants
copied from invariants/*.sql (the statement only: the leading `--` header and comment lines
are dropped, as PostgreSQL's parser drops them for invmon), so every tool runs the same text.

Exit codes: every peer exits non-zero when it finds violations (dbt 1, soda 1, sqlsentinel 1),
so the caller must not treat that as a failure; counts() raises ValueError when the output
does not give a count for every invariant, which is how a real error shows up.

By hand: python bench/peers.py --dsn postgresql://postgres@127.0.0.1:5432/DB
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

PEERS: tuple[str, ...] = ("dbt", "soda", "sqlsentinel")

TEMPLATES = Path(__file__).resolve().parent / "peers"

# Top-level pins; bench/peers/<peer>/constraints.txt pins everything underneath. dbt-core 1.12
# is avoided: installing it needs a download at build time, which fails offline.
PINS: dict[str, tuple[str, ...]] = {
    "dbt": ("dbt-core==1.11.16", "dbt-postgres==1.11.0"),
    "soda": ("soda-postgres==4.28.0", "soda-core==4.28.0"),
    # sqlsentinel reaches PostgreSQL through SQLAlchemy, which needs a driver beside it.
    "sqlsentinel": ("sqlsentinel==0.1.0", "psycopg[binary]==3.3.9"),
}

# The console script each venv provides.
EXECUTABLES: dict[str, str] = {"dbt": "dbt", "soda": "soda", "sqlsentinel": "sqlsentinel"}

# Written into work by prepare(), read by counts(): which invariants the run should report.
NAMES_FILE = "invmon-invariants.json"
STATE_DB = "sqlsentinel-state.db"

COMMANDS_DOC: dict[str, str] = {
    "dbt": (
        "DBT_SEND_ANONYMOUS_USAGE_STATS=false INVMON_PEER_HOST=… INVMON_PEER_PORT=… "
        "INVMON_PEER_USER=… INVMON_PEER_DBNAME=… "
        "dbt test --threads 1 --project-dir WORK --profiles-dir WORK"
    ),
    "soda": (
        "SODA_CORE_TELEMETRY_ENABLED=false INVMON_PEER_HOST=… INVMON_PEER_PORT=… "
        "INVMON_PEER_USER=… INVMON_PEER_PASSWORD= INVMON_PEER_DBNAME=… "
        "soda contract verify -c WORK/contract.yml -ds WORK/datasource.yml"
    ),
    "sqlsentinel": (
        "sqlsentinel init --state-db sqlite:///WORK/sqlsentinel-state.db  # once, not timed\n"
        "sqlsentinel run WORK/alerts.yaml --state-db sqlite:///WORK/sqlsentinel-state.db"
    ),
}


def _check_peer(peer: str) -> None:
    if peer not in PEERS:
        raise ValueError(f"unknown peer {peer!r}; expected one of {', '.join(PEERS)}")


def venv_dir(peer: str) -> Path:
    """Where the peer's venv lives (it need not exist yet)."""
    _check_peer(peer)
    root = os.environ.get("INVMON_BENCH_CACHE") or "~/.cache/invmon-bench"
    return Path(root).expanduser() / "peers" / peer


def executable(peer: str) -> Path:
    return venv_dir(peer) / "bin" / EXECUTABLES[peer]


def _install_stamp(peer: str) -> str:
    # The stamp changes whenever the pins or the constraints do, so an old venv is redone.
    constraints = (TEMPLATES / peer / "constraints.txt").read_text(encoding="utf-8")
    return json.dumps({"pins": PINS[peer], "constraints": constraints}, sort_keys=True)


def install(peer: str) -> Path:
    """Create the peer's venv with its pinned packages, unless it already has them; return it."""
    home = venv_dir(peer)
    stamp_file = home / "invmon-bench-installed.json"
    stamp = _install_stamp(peer)
    installed = executable(peer).exists() and stamp_file.exists()
    if installed and stamp_file.read_text(encoding="utf-8") == stamp:
        return home
    print(f"[peers] installing {peer} into {home}: {' '.join(PINS[peer])}", flush=True)
    # The orchestrator's interpreter (3.11+, which sqlsentinel requires) makes the venv.
    venv.EnvBuilder(with_pip=True, clear=True).create(home)
    pip = [str(home / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    constraints = TEMPLATES / peer / "constraints.txt"
    subprocess.run([*pip, "-q", "-c", str(constraints), *PINS[peer]], check=True)
    stamp_file.write_text(stamp, encoding="utf-8")
    return home


def invariant_statement(path: Path) -> str:
    """The invariant's SQL without its leading `--` header/comment lines and trailing `;`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = 0
    while start < len(lines) and lines[start].strip()[:2] in ("", "--"):
        start += 1
    body = "\n".join(lines[start:]).rstrip()
    while body.endswith(";"):
        body = body[:-1].rstrip()
    if not body:
        raise ValueError(f"{path}: no SQL statement after the header")
    return body


def load_invariants(invariants_dir: Path) -> dict[str, str]:
    """{name: statement} for every invariants_dir/*.sql (the fixtures *.test.yaml are skipped)."""
    found = {p.stem: invariant_statement(p) for p in sorted(invariants_dir.glob("*.sql"))}
    if not found:
        raise ValueError(f"no *.sql invariants in {invariants_dir}")
    return found


def _indent(text: str, prefix: str) -> str:
    # For a YAML block scalar: blank lines stay empty, which YAML keeps as newlines.
    return "\n".join(prefix + line if line.strip() else "" for line in text.splitlines())


def _fill(template: Path, **values: str) -> str:
    # @NAME@ markers instead of string.Template: the files also hold ${env.X} for soda.
    text = template.read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def _connection_env(dsn_parts: dict[str, str]) -> dict[str, str]:
    return {
        "INVMON_PEER_HOST": dsn_parts["host"],
        "INVMON_PEER_PORT": str(dsn_parts.get("port") or "5432"),
        "INVMON_PEER_USER": dsn_parts["user"],
        "INVMON_PEER_PASSWORD": dsn_parts.get("password") or "",
        "INVMON_PEER_DBNAME": dsn_parts["dbname"],
    }


def _prepare_dbt(invariants: dict[str, str], work: Path) -> list[str]:
    for name in ("dbt_project.yml", "profiles.yml"):
        (work / name).write_text((TEMPLATES / "dbt" / name).read_text(encoding="utf-8"))
    tests = work / "tests"
    tests.mkdir()
    for name, sql in invariants.items():
        # dbt renders tests with Jinja; raw keeps a query containing {{, {% or {# literal.
        if re.search(r"\{[{%#]", sql):
            sql = "{% raw %}" + sql + "{% endraw %}"
        (tests / f"{name}.sql").write_text(sql + "\n", encoding="utf-8")
    return [
        str(executable("dbt")),
        "test",
        "--threads",
        "1",
        "--project-dir",
        str(work),
        "--profiles-dir",
        str(work),
    ]


def _prepare_soda(invariants: dict[str, str], dbname: str, work: Path) -> list[str]:
    checks = []
    for name, sql in invariants.items():
        # The qualifier tells apart several checks of one type in one contract.
        checks.append(
            f"  - failed_rows:\n      name: {json.dumps(name)}\n      qualifier: {json.dumps(name)}"
            f"\n      query: |\n{_indent(sql, ' ' * 8)}"
        )
    contract = _fill(
        TEMPLATES / "soda" / "contract.yml.in", DBNAME=dbname, CHECKS="\n".join(checks)
    )
    (work / "contract.yml").write_text(contract, encoding="utf-8")
    (work / "datasource.yml").write_text(
        (TEMPLATES / "soda" / "datasource.yml").read_text(encoding="utf-8")
    )
    return [
        str(executable("soda")),
        "contract",
        "verify",
        "-c",
        str(work / "contract.yml"),
        "-ds",
        str(work / "datasource.yml"),
    ]


# SQLAlchemy's text() reads `:name` as a bind parameter; a backslash keeps it literal. `::` casts
# are left alone by text(), so the shipped queries go through unchanged.
_BIND_LIKE = re.compile(r"(?<![:\w\\]):(?=\w)")


def _prepare_sqlsentinel(
    invariants: dict[str, str], dsn_parts: dict[str, str], work: Path
) -> list[str]:
    url = "postgresql+psycopg://{user}@{host}:{port}/{dbname}".format(
        user=quote(dsn_parts["user"], safe=""),
        host=dsn_parts["host"],
        port=dsn_parts.get("port") or "5432",
        dbname=quote(dsn_parts["dbname"], safe=""),
    )
    alerts = []
    for name, sql in invariants.items():
        literal = _BIND_LIKE.sub(r"\\:", sql)
        wrapped = (
            "SELECT CASE WHEN count(*) > 0 THEN 'ALERT' ELSE 'OK' END AS status,\n"
            f"       count(*) AS actual_value\nFROM (\n{literal}\n) AS invmon_q"
        )
        alerts.append(
            f'  - name: {json.dumps(name)}\n    schedule: "*/15 * * * *"\n'
            f"    query: |\n{_indent(wrapped, ' ' * 6)}"
        )
    config = _fill(TEMPLATES / "sqlsentinel" / "alerts.yaml.in", URL=url, ALERTS="\n".join(alerts))
    (work / "alerts.yaml").write_text(config, encoding="utf-8")
    state = f"sqlite:///{work / STATE_DB}"
    # The state database needs its schema before `run`; that is setup, not part of a run.
    subprocess.run(
        [str(executable("sqlsentinel")), "init", "--state-db", state],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    # Not --dry-run: a dry run prints only ALERT/OK per alert, and writes no history. A real
    # run records actual_value (the count) in the state db; with no `notify` nothing is sent.
    return [str(executable("sqlsentinel")), "run", str(work / "alerts.yaml"), "--state-db", state]


def prepare(
    peer: str, dsn_parts: dict[str, str], invariants_dir: Path, work: Path
) -> tuple[list[str], dict[str, str]]:
    """Write the peer's project into work (created if needed); return (argv, extra env)."""
    _check_peer(peer)
    install(peer)
    work.mkdir(parents=True, exist_ok=True)
    invariants = load_invariants(invariants_dir)
    (work / NAMES_FILE).write_text(json.dumps(sorted(invariants)), encoding="utf-8")
    env = _connection_env(dsn_parts)
    if peer == "dbt":
        argv = _prepare_dbt(invariants, work)
        env |= {"DBT_SEND_ANONYMOUS_USAGE_STATS": "false", "DBT_USE_COLORS": "false"}
    elif peer == "soda":
        argv = _prepare_soda(invariants, dsn_parts["dbname"], work)
        # Telemetry would otherwise retry an unreachable collector for several seconds.
        env |= {"SODA_CORE_TELEMETRY_ENABLED": "false"}
    else:
        argv = _prepare_sqlsentinel(invariants, dsn_parts, work)
        if dsn_parts.get("password"):
            env["PGPASSWORD"] = dsn_parts["password"]
    return argv, env


def _expected(work: Path) -> list[str]:
    try:
        names = json.loads((work / NAMES_FILE).read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"{work} was not prepared ({NAMES_FILE} missing): {e}") from e
    return [str(n) for n in names]


def _counts_dbt(work: Path) -> dict[str, int]:
    path = work / "target" / "run_results.json"
    try:
        results = json.loads(path.read_text(encoding="utf-8"))["results"]
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"dbt: no readable {path}: {e}") from e
    found: dict[str, int] = {}
    for r in results:
        name = str(r.get("unique_id", "")).rsplit(".", 1)[-1]
        # `failures` is the count dbt's wrapper returned; it is null when the test errored.
        if r.get("status") in ("pass", "fail", "warn") and isinstance(r.get("failures"), int):
            found[name] = r["failures"]
        else:
            raise ValueError(f"dbt: test {name} {r.get('status')}: {r.get('message')}")
    return found


_SODA_COUNT = re.compile(r"failed_rows_count:\s*(\d+)")


def _counts_soda(stdout: str, names: list[str]) -> dict[str, int]:
    # Soda prints a grid table, one block per check; the block's first line holds the check name
    # and the first diagnostic, `failed_rows_count: N`. A check that errored has no count.
    found: dict[str, int] = {}
    current: str | None = None
    for line in stdout.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        current = next((c for c in cells if c in names), current)
        match = next((m for m in map(_SODA_COUNT.search, cells) if m), None)
        if match and current is not None:
            found[current] = int(match.group(1))
    return found


def _counts_sqlsentinel(work: Path) -> dict[str, int]:
    path = work / STATE_DB
    if not path.exists():
        raise ValueError(f"sqlsentinel: no state db at {path}")
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT alert_name, status, actual_value, error_message FROM sqlsentinel_executions"
            " WHERE id IN (SELECT max(id) FROM sqlsentinel_executions GROUP BY alert_name)"
        ).fetchall()
    found: dict[str, int] = {}
    for name, status, value, error in rows:
        if status not in ("ALERT", "OK") or value is None:
            raise ValueError(f"sqlsentinel: alert {name} {status}: {error}")
        found[str(name)] = int(value)  # stored as a float column
    return found


def counts(peer: str, stdout: str, stderr: str, work: Path) -> dict[str, int]:
    """{invariant: offending rows} from one run's output or the files it left in work."""
    _check_peer(peer)
    names = _expected(work)
    if peer == "dbt":
        found = _counts_dbt(work)
    elif peer == "soda":
        found = _counts_soda(stdout, names)
    else:
        found = _counts_sqlsentinel(work)
    missing = [n for n in names if n not in found]
    if missing:
        tail = (stderr.strip() or stdout.strip())[-2000:]
        raise ValueError(f"{peer}: no count for {', '.join(missing)}; output ends:\n{tail}")
    return {n: found[n] for n in names}


def dsn_to_parts(dsn: str) -> dict[str, str]:
    """host, port, user, dbname (and password if given) of a postgresql:// URL."""
    url = urlsplit(dsn)
    if url.scheme not in ("postgresql", "postgres") or not url.hostname:
        raise ValueError(f"expected postgresql://user@host:port/dbname, got {dsn!r}")
    parts = {
        "host": url.hostname,
        "port": str(url.port or 5432),
        "user": unquote(url.username or "postgres"),
        "dbname": unquote(url.path.lstrip("/")) or "postgres",
    }
    if url.password is not None:
        parts["password"] = unquote(url.password)
    return parts


def run_measured(
    argv: list[str], env: dict[str, str], work: Path
) -> tuple[str, str, int, float, int]:
    """Run argv; return stdout, stderr, exit code, wall seconds and the child's peak RSS (KiB).

    The peak is read by GNU time, a small C program that starts the command itself: a child
    forked straight from this Python process would count this process's own pages (about
    40 MiB) in its peak until it execs, hiding what a small tool such as psql really uses."""
    timed = shutil.which("time") and Path("/usr/bin/time").exists()
    rss_file = work / "peak-rss.txt"
    command = ["/usr/bin/time", "-f", "%M", "-o", str(rss_file), *argv] if timed else argv
    with open(work / "stdout.txt", "w+") as out, open(work / "stderr.txt", "w+") as err:
        started = time.monotonic()
        proc = subprocess.Popen(
            command, env={**os.environ, **env}, stdout=out, stderr=err, cwd=work
        )
        # wait4 gives this child's own rusage (peak RSS), unlike getrusage(RUSAGE_CHILDREN).
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        peak = usage.ru_maxrss
        if timed:
            # GNU time prints "Command exited with non-zero status N" before the figure.
            peak = int(rss_file.read_text().split()[-1])
        return out.read(), err.read(), proc.returncode, wall, peak


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the invariants once with each peer tool.")
    parser.add_argument("--dsn", required=True, help="postgresql://user@host:port/dbname")
    parser.add_argument("--invariants", type=Path, default=TEMPLATES.parent.parent / "invariants")
    parser.add_argument("--peer", choices=PEERS, action="append", help="default: all of them")
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    opts = parser.parse_args(args)
    parts = dsn_to_parts(opts.dsn)
    failed = 0
    for peer in opts.peer or PEERS:
        install(peer)
        work = Path(tempfile.mkdtemp(prefix=f"invmon-peer-{peer}-"))
        argv, env = prepare(peer, parts, opts.invariants, work)
        print(f"[{peer}] {shlex.join(argv)}", flush=True)
        stdout, stderr, code, wall, rss = run_measured(argv, env, work)
        try:
            found = counts(peer, stdout, stderr, work)
        except ValueError as e:
            print(f"[{peer}] exit {code}, {wall:.2f}s: {e}", file=sys.stderr)
            failed += 1
        else:
            print(
                f"[{peer}] exit {code}, {wall:.2f}s wall, peak RSS {rss // 1024} MiB: "
                + ", ".join(f"{n}={c}" for n, c in found.items()),
                flush=True,
            )
        if opts.keep:
            print(f"[{peer}] work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
