"""May invmon run a target's invariants as the role it connects as?

The fence has four layers (SECURITY.md); the fourth is a role that cannot change anything
(deploy/readonly-role.sql). Connected as a role that can (a superuser, a member of
pg_write_all_data, an owner of the database's objects, one that may still execute the
effectful functions the role script revokes, or a member of a role that can), the other
three are all that stands between an invariant and an effect: as a superuser, a domain's
CHECK or a function labelled STABLE ran their effects (issue 26). So a target is refused
unless the config allows it (`allow_privileged_role`), and one that is allowed says so.

Pure from the catalog's facts to the verdict (`RoleFacts` -> `abilities` -> `RoleVerdict`);
`read_role` is the one read-only query that gathers the facts, on any connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from monitor.fence.known import (
    HARMLESS_EXTENSION_FUNCTIONS,
    HARMLESS_VOLATILE,
    RUNS_SQL_TEXT,
    STATE_FREE_PARALLEL_UNSAFE,
)
from monitor.text import counted

ROLE_SCRIPT = "deploy/readonly-role.sql"
VERIFY_SCRIPT = "deploy/verify-readonly-role.sql"
SHOWN = 5  # names shown of each kind; the rest are counted
# How every refusal starts: it quotes the catalog's names only, never data, so a preview
# that withholds the database's messages still shows it (check.py).
REFUSED = "refused to run target "

# Role attributes that let a role change what it is or what exists (the role script turns
# them off). BYPASSRLS is not one: it changes what the role reads, not what it can change.
ATTRIBUTES = {
    "createrole": "can create roles and grant their membership (CREATEROLE)",
    "createdb": "can create databases (CREATEDB)",
    "replication": "can create replication slots, which hold WAL on the primary (REPLICATION)",
}
# Predefined roles whose members can change something; reading ones (pg_read_all_data,
# pg_read_all_stats, which the role script grants) are not among them.
PREDEFINED = {
    "pg_write_all_data": "it writes every table",
    "pg_write_server_files": "it writes files on the server",
    "pg_execute_server_program": "it runs programs on the server",
    "pg_signal_backend": "it cancels and terminates other sessions",
}
# Of the effectful functions a role may execute, these are named first: what they do is
# plain from their names.
TELLING = (
    "pg_advisory_lock",
    "pg_notify",
    "lo_create",
    "lo_from_bytea",
    "set_config",
    "pg_terminate_backend",
    "txid_current",
    "pg_current_xact_id",
    "pg_logical_emit_message",
    "dblink_exec",
    "pg_file_write",
)
OWNED = {
    "schema": ("schema", "schemas"),
    "relation": ("table, view or sequence", "tables, views or sequences"),
    "function": ("function", "functions"),
}


@dataclass(frozen=True)
class Found:
    """What the catalog found of one kind: how many, and the first few names in order."""

    count: int
    names: tuple[str, ...]


@dataclass(frozen=True)
class RoleFacts:
    """What the catalog says the connected role can do, by kind (see `read_role`)."""

    role: str
    superuser: bool
    found: Mapping[str, Found] = field(default_factory=dict)


def _names(found: Found, skip: str | None = None) -> str:
    names = [n for n in found.names if n != skip]
    more = found.count - len(found.names)
    return ", ".join(names) + (f" and {more:,} more" if more > 0 else "")


def abilities(facts: RoleFacts) -> list[str]:
    """What the role can do that a monitor must not, each a phrase after "which"; empty for
    a role deploy/readonly-role.sql made. A superuser can do everything: said once."""
    if facts.superuser:
        return ["is a superuser"]
    out = []
    if supers := facts.found.get("superuser"):
        out.append(f"is a member of superuser role{'s' * (supers.count > 1)} {_names(supers)}")
    for kind, phrase in ATTRIBUTES.items():
        if granted := facts.found.get(kind):
            others = [n for n in granted.names if n != facts.role]
            via = f", as a member of {', '.join(others)}" if others else ""
            out.append(f"{phrase}{via}")
    if predefined := facts.found.get("predefined"):
        for name in predefined.names:
            out.append(f"is a member of {name} ({PREDEFINED.get(name, 'it can act')})")
    if database := facts.found.get("database"):
        out.append(f"owns database {_names(database)}")
    for kind, (one, many) in OWNED.items():
        if owned := facts.found.get(kind):
            what = f"a {one}" if owned.count == 1 else f"{owned.count:,} {many}"
            out.append(f"owns {what} ({_names(owned)})")
    writes_all = "pg_write_all_data" in (predefined.names if predefined else ())
    if (writable := facts.found.get("writable")) and not writes_all:
        out.append(
            f"may write {counted(writable.count, 'table')} it does not own, by INSERT, "
            f"UPDATE, DELETE or TRUNCATE ({_names(writable)})"
        )
    if effects := facts.found.get("effect"):
        out.append(
            f"may execute {counted(effects.count, 'function')} with effects that "
            f"{ROLE_SCRIPT} revokes ({_names(effects)})"
        )
    return out


@dataclass(frozen=True)
class RoleVerdict:
    """A target's answer: the role, what it can do, and whether it may run anyway."""

    target: str
    role: str
    abilities: tuple[str, ...]
    allowed: bool  # the config (or `check --allow-privileged-role`) allows it
    how_to_allow: str  # e.g. "set targets.payments.allow_privileged_role: true"

    @property
    def privileged(self) -> bool:
        return bool(self.abilities)

    @property
    def refused(self) -> bool:
        return self.privileged and not self.allowed

    def _what(self) -> str:
        return f"role {self.role}, which {'; '.join(self.abilities)}"

    def refusal(self) -> str | None:
        """Why the target is not run, and how to fix it, in one message; None when it runs."""
        if not self.refused:
            return None
        return (
            f"{REFUSED}{self.target} as {self._what()}: connected as a role that can change "
            "the database, only the fence's parser, catalog and READ ONLY transaction stand "
            f"between an invariant and a write. Connect as a role made with {ROLE_SCRIPT} "
            f"(check it with {VERIFY_SCRIPT}), or {self.how_to_allow} to run as this one "
            "anyway"
        )

    def short(self) -> str:
        """The refusal in a few words, for a list of targets (/readyz)."""
        return f"refused to run as {self._what()} (see {ROLE_SCRIPT}, or {self.how_to_allow})"

    def allowance(self) -> str | None:
        """For the status page and /readyz: a target running as a privileged role because it
        is allowed to; None otherwise."""
        if not (self.privileged and self.allowed):
            return None
        return f"target {self.target} runs as {self._what()} (allowed: allow_privileged_role)"


def verdict(target: str, facts: RoleFacts, allowed: bool, how_to_allow: str) -> RoleVerdict:
    return RoleVerdict(target, facts.role, tuple(abilities(facts)), allowed, how_to_allow)


# --- the query ----------------------------------------------------------------------------

# Objects in these schemas are the system's (a superuser's); a role cannot own them.
_NOT_SYSTEM = (
    "n.nspname NOT IN ('pg_catalog', 'information_schema')"
    " AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'"
)
# Kept in step with deploy/readonly-role.sql's revoke and deploy/verify-readonly-role.sql's
# catalog check (tests/fence/test_role_check.py holds a role the script made to it).
_EFFECTFUL = """
    p.prokind IN ('f', 'a', 'w')
    AND p.prorettype NOT IN ('trigger'::regtype, 'event_trigger'::regtype,
        'internal'::regtype, 'language_handler'::regtype, 'fdw_handler'::regtype,
        'index_am_handler'::regtype, 'table_am_handler'::regtype, 'tsm_handler'::regtype)
    AND (
        (n.nspname = 'pg_catalog' AND (p.provolatile = 'v' OR p.proparallel = 'u')
         AND p.proname <> ALL (%(harmless)s))
        OR (x.extname IS NOT NULL AND p.provolatile = 'v'
            AND p.proname <> ALL (%(harmless_extension)s))
        OR ((n.nspname = 'pg_catalog' OR x.extname IS NOT NULL)
            AND p.proname = ANY (%(runs_sql)s)))
    AND has_function_privilege(p.oid, 'EXECUTE')
"""
# `mine`: every role whose rights the connected role has or can take by SET ROLE, itself
# included (pg_has_role MEMBER). For a superuser that is every role, and it can do anything:
# the scans of objects are skipped (`NOT super`).
_ROLE_SQL = f"""
WITH me AS (
    SELECT rolname, rolsuper AS super FROM pg_roles WHERE rolname = current_user
), mine AS (
    SELECT oid, rolname, rolsuper, rolcreaterole, rolcreatedb, rolreplication
    FROM pg_roles WHERE pg_has_role(oid, 'MEMBER')
), found(kind, name, rank) AS (
    SELECT 'superuser', rolname::text, 1 FROM mine WHERE rolsuper
    UNION ALL SELECT 'createrole', rolname::text, 1 FROM mine WHERE rolcreaterole
    UNION ALL SELECT 'createdb', rolname::text, 1 FROM mine WHERE rolcreatedb
    UNION ALL SELECT 'replication', rolname::text, 1 FROM mine WHERE rolreplication
    UNION ALL SELECT 'predefined', rolname::text, 1 FROM mine WHERE rolname = ANY (%(predefined)s)
    UNION ALL
    SELECT 'database', d.datname::text, 1 FROM pg_database d JOIN mine m ON m.oid = d.datdba
    WHERE d.datname = current_database()
    UNION ALL
    SELECT 'schema', n.nspname::text, 1 FROM pg_namespace n JOIN mine m ON m.oid = n.nspowner
    WHERE {_NOT_SYSTEM} AND NOT (SELECT super FROM me)
    UNION ALL
    SELECT 'relation', c.oid::regclass::text, 1
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN mine m ON m.oid = c.relowner
    WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') AND {_NOT_SYSTEM}
      AND NOT (SELECT super FROM me)
    UNION ALL
    SELECT 'function', p.oid::regprocedure::text, 1
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    JOIN mine m ON m.oid = p.proowner
    WHERE {_NOT_SYSTEM} AND NOT (SELECT super FROM me)
    UNION ALL
    SELECT 'writable', c.oid::regclass::text, 1
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p', 'f') AND {_NOT_SYSTEM}
      AND NOT EXISTS (SELECT FROM mine m WHERE m.oid = c.relowner)
      AND has_table_privilege(c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE')
      AND NOT (SELECT super FROM me)
    UNION ALL
    SELECT 'effect', p.oid::regprocedure::text,
        CASE WHEN p.proname = ANY (%(telling)s) THEN 0 ELSE 1 END
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    LEFT JOIN LATERAL (
        SELECT e.extname FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
        WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
        LIMIT 1
    ) x ON true
    WHERE {_EFFECTFUL} AND NOT (SELECT super FROM me)
)
SELECT me.rolname::text, me.super, f.kind, f.n, f.names
FROM me LEFT JOIN (
    SELECT kind, count(*) AS n, (array_agg(name ORDER BY rank, name))[1:{SHOWN}] AS names
    FROM found GROUP BY kind
) f ON true
"""


def read_role(conn: Any) -> RoleFacts:
    """The facts, read on `conn` inside a transaction it has open (READ ONLY is enough)."""
    # Every name resolves in pg_catalog alone (pg_temp last, and empty): what a database's
    # owners created elsewhere cannot change what this reads.
    conn.execute("SET LOCAL search_path = pg_catalog, pg_temp")
    rows = conn.execute(
        _ROLE_SQL,
        {
            "predefined": sorted(PREDEFINED),
            "harmless": sorted(HARMLESS_VOLATILE | STATE_FREE_PARALLEL_UNSAFE),
            "harmless_extension": sorted(HARMLESS_EXTENSION_FUNCTIONS),
            "runs_sql": sorted(RUNS_SQL_TEXT),
            "telling": list(TELLING),
        },
    ).fetchall()
    role, superuser = rows[0][0], bool(rows[0][1])
    found = {kind: Found(int(n), tuple(names)) for _, _, kind, n, names in rows if kind}
    return RoleFacts(role, superuser, found)
