#!/usr/bin/env bash
# Checks the invariants of a pull request, in any CI: lint against the schema (no database),
# run every fixture case (--strict: an invariant must be shown to fire), and, when a
# staging or replica DSN is given, the cost gate. Each step runs even if an earlier one
# failed (all problems at once); the last line names the steps that failed.
#
#   INVMON_TEST_DSN=postgresql://postgres@localhost/postgres \
#   [INVMON_EXPLAIN_DSN=postgresql://invmon_ro@staging/app] [JUNIT_DIR=reports] \
#   bash deploy/ci/check-invariants.sh
#
# Run from the repository's root: the invariants folder and the schema file are those
# invmon.yaml names (`invariants:`, `schema:`). SCHEMA=FILE and INVARIANTS=DIR override them,
# and are needed where there is no invmon.yaml.
#
# Under GitHub Actions each problem is also an annotation on the PR's diff; with JUNIT_DIR
# each step writes JUnit XML there for CIs that read it.
set -uo pipefail
invmon="${INVMON:-invmon}"  # how to call invmon, e.g. "python -m monitor.cli"
# Each array is empty unless overridden (${a[@]+"${a[@]}"}: empty is no word, in any bash).
folder=()  # --invariants DIR, when INVARIANTS overrides invmon.yaml's
schema=()  # --schema FILE, when SCHEMA overrides invmon.yaml's
if [ -n "${INVARIANTS:-}" ]; then folder=(--invariants "$INVARIANTS"); fi
if [ -n "${SCHEMA:-}" ]; then
    schema=(--schema "$SCHEMA")
elif [ ! -f invmon.yaml ]; then
    echo "no invmon.yaml here naming the schema: run from the repository's root, or set" \
        "SCHEMA to the schema file (e.g. pg_dump --schema-only of production)" >&2
    exit 2
fi
failed=()
status=0  # the first failed step's exit code: 2 for lint, 1 for a failing case

junit() {  # --junit FILE for a step, when JUNIT_DIR is set
    if [ -n "${JUNIT_DIR:-}" ]; then
        mkdir -p "$JUNIT_DIR" && echo "--junit $JUNIT_DIR/$1.xml"
    fi
}

step() {  # step NAME COMMAND...: run it, remember it when it fails
    local name="$1"
    shift
    echo "== $name"
    "$@"
    local code=$?
    if [ "$code" -ne 0 ]; then
        failed+=("$name (exit $code)")
        [ "$status" -ne 0 ] || status=$code
    fi
}

# shellcheck disable=SC2046  # junit's output is meant to split into two words
step lint $invmon lint ${folder[@]+"${folder[@]}"} ${schema[@]+"${schema[@]}"} $(junit lint)
# shellcheck disable=SC2046
step "fixture cases" $invmon test ${folder[@]+"${folder[@]}"} ${schema[@]+"${schema[@]}"} --strict \
    $(junit test)
if [ -n "${INVMON_EXPLAIN_DSN:-}" ]; then
    step "cost gate" $invmon explain --dsn "$INVMON_EXPLAIN_DSN" ${folder[@]+"${folder[@]}"}
else
    echo "== cost gate skipped: set INVMON_EXPLAIN_DSN to a staging database or the replica"
fi

if [ ${#failed[@]} -gt 0 ]; then
    printf -v joined '%s, ' "${failed[@]}"
    echo "invariants check FAILED at: ${joined%, }" >&2
    exit "$status"
fi
echo "invariants check passed"
