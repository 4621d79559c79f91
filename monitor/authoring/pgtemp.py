"""Throwaway PostgreSQL servers and databases, for the demo, `invmon test` and the tests.

The server comes from the `pgserver` package, which ships real PostgreSQL binaries in its
wheel and handles running as root, so nothing but `pip install` is needed.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from monitor.authoring.schema_dump import DumpParseError, dump_statements, meta_commands


@contextmanager
def temporary_server() -> Iterator[str]:
    """Start a private server in a temporary folder; yield its admin DSN; remove it all."""
    folder = Path(tempfile.mkdtemp(prefix="invmon-pg-"))
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless here.
        warnings.simplefilter("ignore")
        import pgserver  # imported here: starting a server is its only use

        server = pgserver.get_server(folder, cleanup_mode="stop")  # type: ignore[attr-defined]
        try:
            yield str(server.get_uri())
        finally:
            server.cleanup()
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def scratch_database(admin_dsn: str, prefix: str = "invmon") -> Iterator[str]:
    """Create a database with a unique name; yield its DSN; drop it (even if still in use)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(admin_dsn, dbname=name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def apply_sql(dsn: str, text: str) -> None:
    """Run a script (schema, seed) in one transaction."""
    with psycopg.connect(dsn) as conn:
        conn.execute(text.encode())


class SchemaLoadError(Exception):
    """A statement of the schema file failed; the message names its line."""


def load_schema_dump(dsn: str, text: str, where: str) -> list[str]:
    """Load a schema file (plain SQL or `pg_dump --schema-only` output) in one transaction;
    the warnings about what was left out. See schema_dump.py for what is skipped or tried."""
    try:
        statements = dump_statements(text)
    except DumpParseError as exc:
        raise SchemaLoadError(f"{where}:{exc.line}: cannot parse: {exc.message}") from None
    warnings = []
    skipped = 0
    with psycopg.connect(dsn) as conn, conn.transaction():
        for statement in statements:
            if statement.handling == "skip":
                skipped += 1
                continue
            try:
                with conn.transaction():  # a savepoint: a tried statement may fail alone
                    conn.execute(statement.text.encode())
            except psycopg.Error as exc:
                message = exc.diag.message_primary or str(exc).splitlines()[0]
                if statement.handling == "try":
                    warnings.append(f"{where}:{statement.line}: left out: {message}")
                    continue
                raise SchemaLoadError(f"{where}:{statement.line}: {message}") from None
    metas = meta_commands(text)
    if metas:
        warnings.append(
            f"{where}: {metas} psql meta-command line{'s' * (metas != 1)} (such as \\restrict)"
            " left out"
        )
    if skipped:
        warnings.append(
            f"{where}: {skipped} owner and privilege statement{'s' * (skipped != 1)} left out"
            " (pg_dump --no-owner --no-privileges writes none)"
        )
    return warnings
