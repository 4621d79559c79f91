#!/bin/bash
# The hot standby: cloned from the primary with pg_basebackup (-R writes the standby
# settings), then started; invmon reads here, where nobody can write.
set -euo pipefail
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    until pg_basebackup --host=primary --username=replicator --pgdata="$PGDATA" \
        --wal-method=stream --write-recovery-conf --checkpoint=fast; do
        echo "waiting for the primary…"; sleep 2
    done
    chmod 700 "$PGDATA"
fi
exec postgres -c hot_standby=on
