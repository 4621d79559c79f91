#!/usr/bin/env bash
# What the image build does, without a container engine: copy exactly what the Dockerfile
# COPYs, build the wheels as its first stage does, install them with no index into a fresh
# venv as its second stage does, then start `invmon run` with the image's own config (paths
# moved under a temporary folder) and ask the HEALTHCHECK's question, /readyz and /metrics.
# Usage: INVMON_DSN=postgresql://… deploy/container/check-without-engine.sh
# With EXPECT_PLANTED=deploy/demo/planted.yaml (INVMON_DSN then a database seeded from
# deploy/demo/), the offending-row counts must be the planted ones; deploy/check-kit.sh does so.
# INVMON_VERSION is the Dockerfile's build-arg of that name (deploy/check-kit.sh passes the
# checkout's): the copy has no .git, so without it the wheel gets pyproject's fallback_version.
# Either way /metrics' invmon_build_info must say the version the build was given.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${INVMON_DSN:?set INVMON_DSN to a database the shipped invariants can read}"
work=$(mktemp -d)
stop() {
    # The daemon gone before this returns, so that the port is free for whatever runs next:
    # SIGTERM (its clean stop), then SIGKILL if it is still there after 20 s.
    if [ -n "${daemon:-}" ] && kill "$daemon" 2>/dev/null; then
        local until=$((SECONDS + 20))
        while kill -0 "$daemon" 2>/dev/null && [ "$SECONDS" -lt "$until" ]; do sleep 0.2; done
        kill -KILL "$daemon" 2>/dev/null || true
        wait "$daemon" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap stop EXIT

# The build stage's `COPY <source> ./<dest>` lines, and `COPY pyproject.toml README.md ./`.
sed -n 's/^COPY \([^-/][^ ]*\) \.\/.*$/\1/p; s/^COPY \(pyproject.toml\) README.md .*/\1 README.md/p' \
    deploy/container/Dockerfile | tr ' ' '\n' | while read -r source; do
    mkdir -p "$work/context/$(dirname "$source")"
    cp -r "$source" "$work/context/$source"
done
# With the s3 extra, as the Dockerfile builds and installs it: the image supports S3 sources.
SETUPTOOLS_SCM_PRETEND_VERSION_FOR_INVARIANT_MONITOR="${INVMON_VERSION:-}" \
    python3 -m pip wheel --quiet --no-cache-dir --wheel-dir "$work/wheels" "$work/context[s3]"
python3 -m venv "$work/venv"
set -- "$work"/wheels/invariant_monitor-*.whl
"$work/venv/bin/pip" install --quiet --no-cache-dir --no-index --find-links="$work/wheels" \
    "$1[s3]"
"$work/venv/bin/python" -c 'import boto3, botocore' || {
    echo "the image's install has no boto3: the s3 extra was not installed" >&2
    exit 1
}

mkdir "$work/run"
cp -r invariants "$work/run/invariants"
sed -e "s|/etc/invmon/invariants|$work/run/invariants|" \
    -e "s|/var/lib/invmon/state.db|$work/run/state.db|" \
    -e "s|0.0.0.0:9187|127.0.0.1:9187|" deploy/container/invmon.yaml > "$work/run/invmon.yaml"
(cd "$work/run" && exec "$work/venv/bin/invmon" run --config invmon.yaml) > "$work/run/log" 2>&1 &
daemon=$!
# The installed venv has what the probe imports (PyYAML, prometheus-client): invmon's own.
if ! "$work/venv/bin/python" deploy/tools/check_kit.py probe http://127.0.0.1:9187 --deadline 60 \
    --pid "$daemon" --version "${INVMON_VERSION:-}" \
    ${EXPECT_PLANTED:+--planted "$EXPECT_PLANTED"}; then
    echo "the daemon's log:" >&2
    tail -n 20 "$work/run/log" >&2
    exit 1
fi
echo "the image's contents install and run"
