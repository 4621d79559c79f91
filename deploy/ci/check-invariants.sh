#!/usr/bin/env bash
# Checks the invariants of a pull request, in any CI: lint against the schema (no database),
# run every fixture case (--strict: an invariant must be shown to fire), and, when a
# staging or replica DSN is given, the cost gate.
#
#   SCHEMA=db/schema.sql INVMON_TEST_DSN=postgresql://postgres@localhost/postgres \
#   [INVMON_EXPLAIN_DSN=postgresql://invmon_ro@staging/app] bash deploy/ci/check-invariants.sh
set -euo pipefail
invariants="${INVARIANTS:-invariants}"
invmon="${INVMON:-invmon}"  # how to call invmon, e.g. "python -m monitor.cli"
schema="${SCHEMA:?set SCHEMA to the schema file (e.g. pg_dump --schema-only of production)}"

echo "== lint (against $schema, no database)"
$invmon lint "$invariants" --schema "$schema"

echo "== fixture cases"
$invmon test --invariants "$invariants" --schema "$schema" --strict

if [ -n "${INVMON_EXPLAIN_DSN:-}" ]; then
    echo "== cost gate"
    $invmon explain --dsn "$INVMON_EXPLAIN_DSN" --invariants "$invariants"
else
    echo "== cost gate skipped: set INVMON_EXPLAIN_DSN to a staging database or the replica"
fi
