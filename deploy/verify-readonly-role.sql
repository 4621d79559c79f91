-- Checks, against a live server, that the role invmon uses cannot change anything.
-- Run it AS that role, on each monitored database (the primary shows the most; on a hot
-- standby many effects fail by nature):
--
--     psql -v ON_ERROR_STOP=1 "postgresql://invmon@db/app" -f deploy/verify-readonly-role.sql
--
-- Each effect is tried for real, inside one transaction that is rolled back, and must be
-- refused; then the catalog is asked which VOLATILE functions the role may still execute.
-- It ends with an ERROR listing what the role could do (psql exits 3), or a NOTICE
-- "verified: ...". The effects tried are harmless when they succeed (pg_terminate_backend
-- of no backend, a zero-second sleep, a lock released at disconnect).

DO $verify$
DECLARE
    effects text[][] := ARRAY[
        ['write a table', 'CREATE TABLE invmon_verify_probe (a int)'],
        ['create a temporary table', 'CREATE TEMP TABLE invmon_verify_probe (a int)'],
        ['create a large object', 'SELECT lo_from_bytea(0, ''\x00''::bytea)'],
        ['create an empty large object', 'SELECT lo_create(0)'],
        ['send a notification', 'SELECT pg_notify(''invmon_verify'', ''probe'')'],
        ['assign a transaction id', 'SELECT txid_current()'],
        ['assign a transaction id (xid8)', 'SELECT pg_current_xact_id()'],
        ['take an advisory lock', 'SELECT pg_advisory_lock(8675309)'],
        ['try an advisory lock', 'SELECT pg_try_advisory_lock(8675309)'],
        ['take a transaction advisory lock', 'SELECT pg_advisory_xact_lock(8675309)'],
        ['change a setting for the session', 'SELECT set_config(''work_mem'', ''2GB'', false)'],
        ['terminate a backend', 'SELECT pg_terminate_backend(0)'],
        ['cancel a query', 'SELECT pg_cancel_backend(0)'],
        ['sleep on the server', 'SELECT pg_sleep(0)'],
        ['read a server file', 'SELECT pg_read_file(''/etc/hostname'')'],
        ['list a server directory', 'SELECT pg_ls_dir(''.'')'],
        ['write a WAL record', 'SELECT pg_logical_emit_message(false, ''invmon'', ''probe'')'],
        ['export a snapshot', 'SELECT pg_export_snapshot()'],
        ['pause WAL replay', 'SELECT pg_wal_replay_pause()'],
        ['force a WAL switch', 'SELECT pg_switch_wal()'],
        ['allocate an OID', 'SELECT pg_nextoid(''pg_class''::regclass, ''oid'', ''pg_class_oid_index''::regclass)'],
        ['reach another server (dblink)', 'SELECT dblink_exec(''dbname=postgres'', ''SELECT 1'')'],
        ['write a server file (adminpack)', 'SELECT pg_file_write(''invmon_probe'', ''x'', false)']
    ];
    refused_states text[] := ARRAY[
        '42501',  -- insufficient_privilege: the role layer
        '25006',  -- read_only_sql_transaction: the READ ONLY layer
        '55000',  -- object_not_in_prerequisite_state: e.g. "recovery is not in progress"
        '0A000'   -- feature_not_supported: e.g. "cannot ... during recovery"
    ];
    i int;
    done text[] := '{}';
    tried int := 0;
    skipped text[] := '{}';
    fn text;
BEGIN
    IF current_setting('transaction_read_only') <> 'on' THEN
        done := array_append(done, 'open a read-write transaction (default_transaction_read_only is off)');
    END IF;
    IF current_setting('statement_timeout') IN ('0', '') THEN
        done := array_append(done, 'run without a statement timeout');
    END IF;
    IF current_setting('idle_in_transaction_session_timeout') IN ('0', '') THEN
        done := array_append(done, 'stay idle in a transaction forever');
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = current_user
               AND (rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls))
    THEN
        done := array_append(done, 'act as superuser, create roles or databases, replicate or bypass RLS');
    END IF;
    IF has_database_privilege(current_database(), 'CREATE') THEN
        done := array_append(done, 'create schemas in this database');
    END IF;
    -- Only a superuser can change temp_file_limit: set for the role, it bounds every query.
    IF current_setting('temp_file_limit') = '-1' THEN
        done := array_append(done, 'write temporary files without limit (temp_file_limit is -1)');
    END IF;
    -- What invmon's own check refuses at start (monitor/fence/role_check.py): writing every table,
    -- and owning anything here (directly or through a role it is a member of).
    FOR fn IN
        SELECT r.rolname FROM pg_roles r
        WHERE (r.rolname IN ('pg_write_all_data', 'pg_write_server_files',
                             'pg_execute_server_program', 'pg_signal_backend')
               OR (r.rolsuper AND r.rolname <> current_user))
          AND pg_has_role(r.oid, 'MEMBER')
        ORDER BY 1
    LOOP
        done := array_append(done, format('act as a member of %s', fn));
    END LOOP;
    IF EXISTS (SELECT FROM pg_database d WHERE d.datname = current_database()
               AND pg_has_role(d.datdba, 'MEMBER')) THEN
        done := array_append(done, 'own this database');
    END IF;
    FOR fn IN
        SELECT format('own %s %s', kind, name) FROM (
            SELECT 'schema' AS kind, n.nspname::text AS name, n.nspowner AS owner
            FROM pg_namespace n
            UNION ALL
            SELECT 'relation', c.oid::regclass::text, c.relowner
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
            UNION ALL
            SELECT 'function', p.oid::regprocedure::text, p.proowner
            FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        ) o
        WHERE pg_has_role(o.owner, 'MEMBER')
          AND NOT EXISTS (SELECT FROM pg_roles r WHERE r.oid = o.owner AND r.rolsuper)
        ORDER BY 1 LIMIT 20
    LOOP
        done := array_append(done, fn);
    END LOOP;

    FOR i IN 1 .. array_length(effects, 1) LOOP
        BEGIN
            EXECUTE effects[i][2];
            done := array_append(done, effects[i][1]);
        EXCEPTION
            WHEN undefined_function THEN
                skipped := array_append(skipped, effects[i][1]);
            WHEN OTHERS THEN
                IF SQLSTATE = ANY (refused_states) THEN
                    tried := tried + 1;
                    RAISE NOTICE 'refused: % (%)', effects[i][1], SQLERRM;
                ELSE
                    done := array_append(done, format('%s (failed, but only with %s: %s)',
                                           effects[i][1], SQLSTATE, SQLERRM));
                END IF;
        END;
    END LOOP;

    -- The catalog's word: VOLATILE functions with effects, and functions that run SQL from
    -- text, that this role may still execute.
    FOR fn IN
        SELECT p.oid::regprocedure::text
        FROM pg_proc p
        WHERE p.prokind IN ('f', 'a', 'w')
          AND has_function_privilege(p.oid, 'EXECUTE')
          AND (p.provolatile = 'v' OR p.proname IN (
            'query_to_xml', 'query_to_xmlschema', 'query_to_xml_and_xmlschema',
            'cursor_to_xml', 'cursor_to_xmlschema', 'table_to_xml', 'table_to_xmlschema',
            'table_to_xml_and_xmlschema', 'schema_to_xml', 'schema_to_xmlschema',
            'schema_to_xml_and_xmlschema', 'database_to_xml', 'database_to_xmlschema',
            'database_to_xml_and_xmlschema', 'ts_stat', 'ts_rewrite', 'crosstab',
            'crosstab2', 'crosstab3', 'crosstab4', 'connectby'))
          AND p.prorettype NOT IN ('trigger'::regtype, 'event_trigger'::regtype,
                'internal'::regtype, 'language_handler'::regtype, 'fdw_handler'::regtype,
                'index_am_handler'::regtype, 'table_am_handler'::regtype,
                'tsm_handler'::regtype)
          AND (p.pronamespace = 'pg_catalog'::regnamespace OR EXISTS (
                SELECT FROM pg_depend d
                WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'))
          AND NOT (p.pronamespace <> 'pg_catalog'::regnamespace
                   AND p.proname IN ('pg_stat_statements', 'pg_stat_statements_info'))
          AND NOT (p.pronamespace = 'pg_catalog'::regnamespace AND p.proname IN (
            'clock_timestamp', 'timeofday', 'random', 'random_normal', 'gen_random_uuid',
            'uuidv4', 'uuidv7', 'pg_relation_size', 'pg_table_size', 'pg_indexes_size',
            'pg_total_relation_size', 'pg_database_size', 'pg_tablespace_size',
            'pg_is_in_recovery', 'pg_last_wal_receive_lsn', 'pg_last_wal_replay_lsn',
            'pg_last_xact_replay_timestamp', 'pg_current_wal_lsn', 'pg_current_wal_insert_lsn',
            'pg_current_wal_flush_lsn', 'pg_is_wal_replay_paused',
            'pg_get_wal_replay_pause_state', 'pg_blocking_pids',
            'pg_safe_snapshot_blocking_pids', 'pg_lock_status', 'pg_xact_commit_timestamp',
            'pg_last_committed_xact', 'pg_xact_status', 'txid_status', 'pg_partition_tree',
            'pg_partition_ancestors', 'pg_jit_available', 'pg_notification_queue_usage',
            'pg_sequence_last_value', 'pg_prepared_xact', 'pg_show_replication_origin_status',
            'pg_stat_get_recovery_prefetch', 'pg_stat_get_xact_numscans',
            'pg_stat_get_xact_tuples_returned', 'pg_stat_get_xact_tuples_fetched',
            'pg_stat_get_xact_tuples_inserted', 'pg_stat_get_xact_tuples_updated',
            'pg_stat_get_xact_tuples_deleted', 'pg_stat_get_xact_tuples_hot_updated',
            'pg_stat_get_xact_tuples_newpage_updated', 'pg_stat_get_io',
            'pg_stat_get_xact_blocks_fetched', 'pg_stat_get_xact_blocks_hit',
            'pg_stat_get_xact_function_calls', 'pg_stat_get_xact_function_total_time',
            'pg_stat_get_xact_function_self_time', 'pg_get_backend_memory_contexts',
            'pg_get_shmem_allocations', 'array_shuffle', 'array_sample'))
        ORDER BY 1
    LOOP
        done := array_append(done, format('execute %s', fn));
    END LOOP;

    IF array_length(done, 1) > 0 THEN
        RAISE EXCEPTION 'role % is not read-only: it can %', current_user,
            array_to_string(done, '; ');
    END IF;
    RAISE NOTICE 'verified: role % cannot change anything here (% effects refused%)',
        current_user, tried,
        CASE WHEN array_length(skipped, 1) > 0
             THEN format('; not installed: %s', array_to_string(skipped, ', ')) ELSE '' END;
END
$verify$;
