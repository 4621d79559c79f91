#!/bin/bash
# Runs once, when the primary's data folder is created (docker-entrypoint-initdb.d): the demo
# schema and its planted violations, invmon's least-privilege role, and a replication role
# for the standby. Passwords come from the environment (compose's .env), never this file.
set -euo pipefail
psql=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB")
"${psql[@]}" -f /invmon/demo/schema.sql
"${psql[@]}" -f /invmon/demo/seed.sql
"${psql[@]}" -f /invmon/readonly-role.sql
# Through psql variables (:'…' quotes them): a password with a quote stays a password.
"${psql[@]}" -v pw="$INVMON_DB_PASSWORD" <<< "ALTER ROLE invmon PASSWORD :'pw';"
"${psql[@]}" -v pw="$REPLICATION_PASSWORD" \
    <<< "CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD :'pw';"
echo "host replication replicator all scram-sha-256" >> "$PGDATA/pg_hba.conf"
