#!/usr/bin/env bash
# What the image build does, without a container engine: copy exactly what the Dockerfile
# COPYs, build the wheels as its first stage does, install them with no index into a fresh
# venv as its second stage does, then start `invmon run` with the image's own config (paths
# moved under a temporary folder) and ask the HEALTHCHECK's question, /readyz and /metrics.
# Usage: INVMON_DSN=postgresql://… deploy/container/check-without-engine.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${INVMON_DSN:?set INVMON_DSN to a database the shipped invariants can read}"
work=$(mktemp -d)
trap 'kill "${daemon:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT

sed -n 's/^COPY \([^-/][^ ]*\) \.\/.*$/\1/p; s/^COPY \(pyproject.toml\) README.md .*/\1 README.md/p' \
    deploy/container/Dockerfile | tr ' ' '\n' | while read -r source; do
    mkdir -p "$work/context/$(dirname "$source")"
    cp -r "$source" "$work/context/$source"
done
python3 -m pip wheel --quiet --no-cache-dir --wheel-dir "$work/wheels" "$work/context"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --no-cache-dir --no-index --find-links="$work/wheels" \
    "$work"/wheels/invariant_monitor-*.whl

mkdir "$work/run"
cp -r invariants "$work/run/invariants"
sed -e "s|/etc/invmon/invariants|$work/run/invariants|" \
    -e "s|/var/lib/invmon/state.db|$work/run/state.db|" \
    -e "s|0.0.0.0:9187|127.0.0.1:9187|" deploy/container/invmon.yaml > "$work/run/invmon.yaml"
(cd "$work/run" && exec "$work/venv/bin/invmon" run --config invmon.yaml) > "$work/run/log" 2>&1 &
daemon=$!
for _ in $(seq 1 30); do
    if "$work/venv/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9187/healthz', timeout=4)" 2>/dev/null; then
        break
    fi
    sleep 1
done
"$work/venv/bin/python" - <<'PY'
import urllib.request
for path in ("/healthz", "/readyz"):
    with urllib.request.urlopen(f"http://127.0.0.1:9187{path}", timeout=4) as answer:
        print(path, answer.status)
with urllib.request.urlopen("http://127.0.0.1:9187/metrics", timeout=4) as answer:
    print("\n".join(l for l in answer.read().decode().splitlines() if l.startswith("invmon_offending_rows")))
PY
echo "the image's contents install and run"
