"""`invmon init` and `invmon new`: a repository of invariants that works from its first
commit, and a new invariant with its cases, suggested from the schema. The file contents are
decided here (pure); the CLI writes them, never over an existing file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from monitor.authoring.schema_check import Tables

EXAMPLE_SCHEMA = """\
-- The production schema, for `invmon lint --schema` and `invmon test` (no database needed).
-- Replace this example with the real one, and refresh it when the schema changes:
--
--   pg_dump --schema-only --no-owner --no-privileges "$PRODUCTION_DSN" > db/schema.sql
--
CREATE TABLE orders (
    id bigint PRIMARY KEY,
    status text NOT NULL,
    total numeric(12, 2) NOT NULL,
    placed_at timestamptz NOT NULL
);
"""

EXAMPLE_INVARIANT = """\
-- description: No order has a negative total; one would mean a refund was applied twice.
-- severity: warning
-- owner: "@data-reliability"
-- key: [id]

-- The query returns the offending rows: zero rows means the invariant holds.
SELECT o.id, o.total, o.status
FROM orders AS o
WHERE o.total < 0
"""

EXAMPLE_CASES = """\
cases:
  - name: a negative total fires
    rows:
      orders: [{id: 1, total: -5.00}, {id: 2, total: 10.00}]
    expect:
      keys: [[1]]
  - name: positive totals hold
    rows:
      orders: [{id: 3, total: 0.00}]
    expect:
      count: 0
"""

CONFIG = """\
# invmon's config. Offline commands (lint, test) need none of the variables below; a
# command that needs one says which (docs/configuring.md).
invariants: invariants
schema: db/schema.sql
dsn: ${INVMON_REPLICA_DSN}          # the read replica, for check, explain and run
slack:
  token: ${SLACK_BOT_TOKEN:-}       # unset: alerts print to stdout
  channel: "#invariants"
"""

# What the daemon writes beside the config (`state.path`, a SQLite file, and the files
# SQLite and the single-daemon lock keep next to it): never code to review.
GITIGNORE = """\
# invmon's state store (state.path in invmon.yaml): runs and incidents, not code.
invmon-state.db
invmon-state.db-wal
invmon-state.db-shm
invmon-state.db.lock
"""


@dataclass(frozen=True)
class Planned:
    path: Path  # relative to the repository
    text: str
    executable: bool = False


def invmon_source() -> str:
    """Where this invmon was installed from, as pip can install it again (a git URL at its
    commit, or a file URL); empty when it cannot be told."""
    try:
        direct = metadata.distribution("invariant-monitor").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return ""
    if not direct:
        return ""
    info = json.loads(direct)
    vcs = info.get("vcs_info")
    if vcs and vcs.get("vcs") == "git":
        return f"git+{info['url']}@{vcs['commit_id']}"
    return ""


def workflow(template: str, source: str) -> str:
    """The PR workflow for a repository that holds only invariants: invmon comes from
    `source` (or the INVMON_SOURCE repository variable), never from the PR."""
    install = (
        "      - run: |\n"
        '          if [ -z "$INVMON_SOURCE" ]; then\n'
        '            echo "set the repository variable INVMON_SOURCE to the invmon release to '
        "install: a release tag (invariant-monitor @ "
        "git+https://github.com/your-org/invmon@vX.Y.Z; see invmon's CHANGELOG.md) or a "
        'wheel URL" >&2\n'
        "            exit 1\n"
        "          fi\n"
        '          pip install "$INVMON_SOURCE"\n'
        "        env:\n"
        f"          INVMON_SOURCE: ${{{{ vars.INVMON_SOURCE || '{source}' }}}}"
    )
    pattern = re.compile(
        r"      # invmon itself never comes from the PR"
        r".*?INVMON_SOURCE: \$\{\{ vars\.INVMON_SOURCE \}\}",
        re.S,
    )
    replaced, count = pattern.subn(install, template)
    assert count == 2, "the workflow template changed; update scaffold.workflow"
    # The schema is the one invmon.yaml names (`schema:`), as for `invmon lint` and `test`
    # run by hand: one place to change it.
    replaced, count = re.subn(r"\n      SCHEMA: [^\n]*", "", replaced)
    assert count == 1, "the workflow template changed; update scaffold.workflow"
    own = "# GitHub Actions: the PR checks of this repository of invariants.\n"
    return re.sub(r"\A# GitHub Actions: copy to [^\n]*\n# [^\n]*\n", own, replaced)


ROLE_SCRIPTS = ("readonly-role.sql", "verify-readonly-role.sql")


def repository(kit: Path, roles: Path, source: str, has_invariants: bool = False) -> list[Planned]:
    """Every file of a new repository of invariants; `kit` is deploy/ci and `roles` deploy/
    (or their copies in the wheel): the role scripts go where invmon's messages say they
    are, deploy/. The example invariant only where there is none yet (a re-run must not
    bring it back)."""
    example = [
        Planned(Path("invariants/negative_totals.sql"), EXAMPLE_INVARIANT),
        Planned(Path("invariants/negative_totals.test.yaml"), EXAMPLE_CASES),
    ]
    return [
        Planned(Path("invmon.yaml"), CONFIG),
        Planned(Path(".gitignore"), GITIGNORE),
        Planned(Path("db/schema.sql"), EXAMPLE_SCHEMA),
        *([] if has_invariants else example),
        Planned(
            Path(".github/workflows/invariants.yml"),
            workflow((kit / "invariants-pr.yml").read_text(encoding="utf-8"), source),
        ),
        Planned(
            Path("deploy/ci/check-invariants.sh"),
            (kit / "check-invariants.sh").read_text(encoding="utf-8"),
            executable=True,
        ),
        Planned(
            Path(".github/pull_request_template.md"),
            _without_copy_note((kit / "pull_request_template.md").read_text(encoding="utf-8")),
        ),
        Planned(
            Path(".github/CODEOWNERS"),
            _without_copy_note((kit / "CODEOWNERS.example").read_text(encoding="utf-8")),
        ),
        *(
            Planned(Path("deploy") / name, (roles / name).read_text(encoding="utf-8"))
            for name in ROLE_SCRIPTS
        ),
    ]


def _without_copy_note(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[1:]) if lines and "Copy to" in lines[0] else text


def quoted(name: str) -> str:
    """A name as SQL must write it for PostgreSQL to read it back exactly."""
    return name if re.fullmatch(r"[a-z_][a-z0-9_$]*", name) else '"' + name.replace('"', '""') + '"'


def _yaml_key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", name) else json.dumps(name)


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a new invariant, or None. A name is its path in the invariants
    folder without `.sql` (`payments/refunds`), so it may hold folders, but never one that
    leads out of the folder: `../x` or `/tmp/x` would write beside it or anywhere."""
    parts = name.replace("\\", "/").split("/")
    if "\0" in name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return (
            f"{name!r} is not an invariant name: it is a path inside the invariants folder, "
            "without `..`, a leading `/` or empty parts (e.g. payments/duplicate_refunds)"
        )
    return None


def new_invariant(name: str, table: str | None, tables: Tables) -> list[Planned]:
    """NAME.sql and NAME.test.yaml, written against `table` (or the schema's first)."""
    names = sorted(t for t in tables if not t.startswith("public."))
    chosen = table or (names[0] if names else None)
    columns = list(tables.get(chosen, {})) if chosen else []
    key = columns[0] if columns else "id"
    shown = ", ".join(f"t.{quoted(c)}" for c in columns[:4]) or "t.id"
    source = ".".join(quoted(part) for part in chosen.split(".")) if chosen else "your_table"
    sql = (
        "-- description: TODO what must hold, and why it matters (a stranger on call reads it)\n"
        "-- severity: warning\n"
        '-- owner: "@your-team"\n'
        f"-- key: [{key}]\n\n"
        "-- Return the rows that break it; zero rows means it holds.\n"
        f"SELECT {shown}\nFROM {source} AS t\nWHERE false  -- TODO: the condition that is broken\n"
    )
    listed = ", ".join(f"{_yaml_key(c)}: TODO" for c in columns[:2]) or "id: 1"
    fixture_table = _yaml_key(chosen or "your_table")
    cases = (
        "cases:\n"
        "  - name: TODO it fires when …\n"
        "    rows:\n"
        f"      {fixture_table}: [{{{listed}}}]  # only the columns the query reads\n"
        "    expect:\n"
        "      keys: [[TODO]]\n"
        "  - name: TODO it holds when …\n"
        "    rows:\n"
        f"      {fixture_table}: []\n"
        "    expect:\n"
        "      count: 0\n"
    )
    base = Path(name.removesuffix(".sql"))
    return [
        Planned(base.with_name(base.name + ".sql"), sql),
        Planned(base.with_name(base.name + ".test.yaml"), cases),
    ]
