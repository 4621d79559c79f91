-- invmon's database role: least privilege, read-only by construction.
--
-- Run it as a superuser on the PRIMARY, in each database invmon monitors (roles are
-- cluster-wide, privileges per database; all of it replicates to the standbys invmon reads):
--
--     psql -v ON_ERROR_STOP=1 -d app -f deploy/readonly-role.sql
--
-- then give the role its password out of band, never in a file:  \password invmon
-- and check the result as that role with deploy/verify-readonly-role.sql.
--
-- Settings (optional), given as session settings, for example
--     PGOPTIONS='-c invmon.role=invmon_payments -c invmon.schemas=public,billing' psql ...
--   invmon.role               the role invmon logs in as             (default: invmon)
--   invmon.schemas            schemas it may read, comma-separated    (default: public)
--   invmon.effects_group      a NOLOGIN role that keeps EXECUTE on what is revoked from
--                             PUBLIC below                            (default: app_effects)
--   invmon.monitors_group     a NOLOGIN role with no privileges that marks every monitoring
--                             role this script made, so that running it for a second one
--                             never makes the first a member of the effects group
--                                                                     (default: invmon_monitors)
--   invmon.statement_timeout  the role's default statement timeout    (default: 5min)
--   invmon.temp_file_limit    what one session of the role may write to temporary files at
--                             once (sorts, hashes, a function's result that spills); only a
--                             superuser can change it, so it bounds every invariant the role
--                             runs, times its CONNECTION LIMIT in all  (default: 1GB)
--   invmon.read_all_stats     on: grant pg_read_all_stats, which the replica-lag check needs
--                             to tell a caught-up standby from a cut one; it also shows
--                             other sessions' query text (pg_stat_activity.query), which an
--                             invariant could then report. off: lag falls back to the age of
--                             the last replayed commit, which reads stale on an idle primary.
--                                                                     (default: on)
--
-- What it does, and why (docs/security.md has the whole threat model):
--  1. The role logs in, owns nothing, cannot create anything, and every transaction it
--     opens is READ ONLY (default_transaction_read_only), with a statement timeout, an idle
--     transaction timeout and a temp_file_limit that only a superuser can raise.
--  2. It may SELECT the watched schemas (and tables created there later by the role that runs
--     this script), and read server statistics (pg_read_all_stats) for the replica-lag check.
--  3. PostgreSQL grants EXECUTE on most functions to PUBLIC, so any role can take advisory
--     locks, send notifications, create large objects, assign transaction ids or change
--     session settings, even inside a READ ONLY transaction. There is no "deny" in
--     PostgreSQL's privileges, so EXECUTE on each such function is revoked from PUBLIC and
--     granted to the effects group instead, and every other role that exists now becomes a
--     member of that group: applications keep what they had, the monitor does not.
--     "Such a function" is decided by the catalog, as invmon's fence decides: VOLATILE (or a
--     built-in that is PARALLEL UNSAFE, i.e. assigns state), not in the short list of
--     harmless readers below, in pg_catalog or in an installed extension (dblink, adminpack,
--     http, ...). Application-defined functions are left alone; invmon's fence refuses the
--     VOLATILE ones anyway.
--
-- A role created later does not join the effects group by itself: add it with
--     GRANT app_effects TO new_role;
-- Re-run this script after installing an extension (it is idempotent).
-- On a managed service where even the administrator may not revoke on pg_catalog, each
-- refused revoke is reported as a WARNING and the rest still applies; invmon's fence and the
-- READ ONLY transaction remain.

DO $invmon$
DECLARE
    monitor  text := coalesce(nullif(current_setting('invmon.role', true), ''), 'invmon');
    schemas  text := coalesce(nullif(current_setting('invmon.schemas', true), ''), 'public');
    keepers  text := coalesce(nullif(current_setting('invmon.effects_group', true), ''),
                              'app_effects');
    monitors text := coalesce(nullif(current_setting('invmon.monitors_group', true), ''),
                              'invmon_monitors');
    timeout  text := coalesce(nullif(current_setting('invmon.statement_timeout', true), ''),
                              '5min');
    temp_limit text := coalesce(nullif(current_setting('invmon.temp_file_limit', true), ''),
                                '1GB');
    all_stats boolean := coalesce(nullif(current_setting('invmon.read_all_stats', true), ''),
                                  'on')::boolean;
    -- They run SQL handed to them as text (or read a relation named in a string), which the
    -- fence never sees, whatever their volatility. Kept in step with RUNS_SQL_TEXT in
    -- monitor/fence/known.py (a test compares them).
    runs_sql text[] := ARRAY[
        'query_to_xml', 'query_to_xmlschema', 'query_to_xml_and_xmlschema', 'cursor_to_xml',
        'cursor_to_xmlschema', 'table_to_xml', 'table_to_xmlschema',
        'table_to_xml_and_xmlschema', 'schema_to_xml', 'schema_to_xmlschema',
        'schema_to_xml_and_xmlschema', 'database_to_xml', 'database_to_xmlschema',
        'database_to_xml_and_xmlschema', 'ts_stat', 'ts_rewrite', 'crosstab', 'crosstab2',
        'crosstab3', 'crosstab4', 'connectby'];
    -- Readers an extension installs VOLATILE (HARMLESS_EXTENSION_FUNCTIONS in fence/known.py).
    harmless_ext text[] := ARRAY['pg_stat_statements', 'pg_stat_statements_info'];
    -- VOLATILE only because their answer changes; none writes, signals, locks or reaches
    -- outside the server. Kept in step with HARMLESS_VOLATILE and STATE_FREE_PARALLEL_UNSAFE
    -- in monitor/fence/known.py (a test compares them).
    harmless text[] := ARRAY[
        'clock_timestamp', 'timeofday', 'random', 'random_normal', 'gen_random_uuid',
        'uuidv4', 'uuidv7', 'pg_relation_size', 'pg_table_size', 'pg_indexes_size',
        'pg_total_relation_size', 'pg_database_size', 'pg_tablespace_size',
        'pg_is_in_recovery', 'pg_last_wal_receive_lsn', 'pg_last_wal_replay_lsn',
        'pg_last_xact_replay_timestamp', 'pg_current_wal_lsn', 'pg_current_wal_insert_lsn',
        'pg_current_wal_flush_lsn', 'pg_is_wal_replay_paused', 'pg_get_wal_replay_pause_state',
        'pg_blocking_pids', 'pg_safe_snapshot_blocking_pids', 'pg_lock_status',
        'pg_xact_commit_timestamp', 'pg_last_committed_xact', 'pg_xact_status', 'txid_status',
        'pg_partition_tree', 'pg_partition_ancestors', 'pg_jit_available',
        'pg_notification_queue_usage', 'pg_sequence_last_value', 'pg_prepared_xact',
        'pg_show_replication_origin_status', 'pg_stat_get_recovery_prefetch',
        'pg_stat_get_xact_numscans', 'pg_stat_get_xact_tuples_returned',
        'pg_stat_get_xact_tuples_fetched', 'pg_stat_get_xact_tuples_inserted',
        'pg_stat_get_xact_tuples_updated', 'pg_stat_get_xact_tuples_deleted',
        'pg_stat_get_xact_tuples_hot_updated', 'pg_stat_get_xact_tuples_newpage_updated',
        'pg_stat_get_io', 'pg_stat_get_xact_blocks_fetched', 'pg_stat_get_xact_blocks_hit',
        'pg_stat_get_xact_function_calls', 'pg_stat_get_xact_function_total_time',
        'pg_stat_get_xact_function_self_time', 'pg_get_backend_memory_contexts',
            'pg_get_shmem_allocations', 'array_shuffle', 'array_sample',
        -- PARALLEL UNSAFE built-ins that only read the session's state
        'current_schema', 'current_schemas', 'txid_current_if_assigned',
        'pg_current_xact_id_if_assigned'];
    schema_name text;
    member      text;
    fn          regprocedure;
    revoked     int := 0;
    refused     int := 0;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = monitor) THEN
        EXECUTE format('CREATE ROLE %I LOGIN', monitor);
    END IF;
    EXECUTE format('ALTER ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION '
                   'NOBYPASSRLS INHERIT CONNECTION LIMIT 32', monitor);
    EXECUTE format('ALTER ROLE %I SET default_transaction_read_only = on', monitor);
    EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', monitor, timeout);
    EXECUTE format('ALTER ROLE %I SET lock_timeout = %L', monitor, '5s');
    EXECUTE format('ALTER ROLE %I SET idle_in_transaction_session_timeout = %L', monitor,
                   '1min');
    EXECUTE format('ALTER ROLE %I SET temp_file_limit = %L', monitor, temp_limit);

    EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), monitor);
    FOREACH schema_name IN ARRAY string_to_array(schemas, ',') LOOP
        schema_name := btrim(schema_name);
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', schema_name, monitor);
        EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO %I', schema_name, monitor);
        EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT ON TABLES TO %I',
                       schema_name, monitor);
    END LOOP;
    -- Replica freshness: pg_stat_wal_receiver's columns are visible with this role only.
    IF all_stats THEN
        EXECUTE format('GRANT pg_read_all_stats TO %I', monitor);
    ELSIF pg_has_role(monitor, 'pg_read_all_stats', 'MEMBER') THEN
        EXECUTE format('REVOKE pg_read_all_stats FROM %I', monitor);
    END IF;

    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = keepers) THEN
        EXECUTE format('CREATE ROLE %I NOLOGIN', keepers);
    END IF;
    -- Every monitoring role is marked, so a later run for another one (a second target's
    -- role) leaves it out of the effects group below: it made the first one privileged.
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = monitors) THEN
        EXECUTE format('CREATE ROLE %I NOLOGIN NOINHERIT', monitors);
    END IF;
    IF NOT pg_has_role(monitor, monitors, 'MEMBER') THEN
        EXECUTE format('GRANT %I TO %I', monitors, monitor);
    END IF;
    -- No monitoring role is a member of the effects group, including one an earlier run
    -- for another role made one.
    FOR member IN
        SELECT m.rolname FROM pg_roles m
        WHERE pg_has_role(m.rolname, monitors, 'MEMBER') AND m.rolname <> monitors
          AND NOT m.rolsuper
          AND EXISTS (SELECT FROM pg_auth_members a
                      WHERE a.member = m.oid AND a.roleid = keepers::regrole)
    LOOP
        EXECUTE format('REVOKE %I FROM %I', keepers, member);
    END LOOP;
    FOR member IN
        SELECT rolname FROM pg_roles
        WHERE rolname NOT IN (monitor, keepers, monitors) AND NOT rolsuper
          AND rolname !~ '^pg_'
          AND NOT pg_has_role(rolname, keepers, 'MEMBER')
          AND NOT pg_has_role(rolname, monitors, 'MEMBER')  -- another monitoring role
          AND NOT pg_has_role(monitor, rolname, 'MEMBER')  -- the monitor must not inherit it
    LOOP
        EXECUTE format('GRANT %I TO %I', keepers, member);
    END LOOP;

    FOR fn IN
        SELECT p.oid::regprocedure
        FROM pg_proc p
        LEFT JOIN LATERAL (
            SELECT e.extname FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
            WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
        ) x ON true
        WHERE p.prokind IN ('f', 'a', 'w')
          AND p.prorettype NOT IN ('trigger'::regtype, 'event_trigger'::regtype,
                'internal'::regtype, 'language_handler'::regtype, 'fdw_handler'::regtype,
                'index_am_handler'::regtype, 'table_am_handler'::regtype,
                'tsm_handler'::regtype)
          AND (p.proacl IS NULL OR EXISTS (
                SELECT FROM aclexplode(p.proacl) a
                WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'))
          AND (
            (p.pronamespace = 'pg_catalog'::regnamespace
             AND (p.provolatile = 'v' OR p.proparallel = 'u')
             AND p.proname <> ALL (harmless))
            OR (x.extname IS NOT NULL AND p.provolatile = 'v'
                AND p.proname <> ALL (harmless_ext))
            OR ((p.pronamespace = 'pg_catalog'::regnamespace OR x.extname IS NOT NULL)
                AND p.proname = ANY (runs_sql))
          )
    LOOP
        BEGIN
            EXECUTE format('REVOKE EXECUTE ON ROUTINE %s FROM PUBLIC', fn);
            EXECUTE format('GRANT EXECUTE ON ROUTINE %s TO %I', fn, keepers);
            revoked := revoked + 1;
        EXCEPTION WHEN insufficient_privilege THEN
            refused := refused + 1;
            RAISE WARNING 'cannot revoke EXECUTE on % from PUBLIC: %', fn, SQLERRM;
        END;
    END LOOP;

    IF pg_has_role(monitor, keepers, 'MEMBER') THEN
        RAISE EXCEPTION 'role % inherits % through another role; it would keep every effect',
            monitor, keepers;
    END IF;
    RAISE NOTICE 'role %: read-only, reads schemas %; EXECUTE on % effectful functions now '
                 'goes through % (% could not be revoked)', monitor, schemas, revoked, keepers,
                 refused;
END
$invmon$;
