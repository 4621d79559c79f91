#!/usr/bin/env bash
# Counts an invariant with 10,000,000 offending rows through the real CLI and reports the
# process's peak memory. The target (issue 2): exact count, peak RSS under 150 MB.
#   INVMON_BENCH_DSN=postgresql://postgres@127.0.0.1:5432/postgres bash bench/ten_million_rows.sh
set -euo pipefail
dsn="${INVMON_BENCH_DSN:-${INVMON_TEST_DSN:?set INVMON_BENCH_DSN to a PostgreSQL DSN}}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/ten_million.sql" <<'SQL'
-- description: Bench only; every generated row offends.
-- key: [id]
-- timeout: 5m
-- sample: 20
SELECT g AS id, md5(g::text) AS note FROM generate_series(1, 10000000) AS g
SQL
/usr/bin/time -v invmon check --dsn "$dsn" --invariants "$dir" --format json \
    > "$dir/out.json" 2> "$dir/time.txt" || true
python3 - "$dir/out.json" "$dir/time.txt" <<'PY'
import json, re, sys
result = json.load(open(sys.argv[1]))["results"][0]
timing = open(sys.argv[2]).read()
rss_mb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", timing).group(1)) / 1024
wall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", timing).group(1)
print(f"status={result['status']} count={result['count']:,} rows={len(result['rows'])} "
      f"peak_rss={rss_mb:.1f} MB wall={wall}")
assert result["count"] == 10_000_000, result
assert rss_mb < 150, rss_mb
PY
