-- A login role that can only read, for invmon on the replica. Run on the primary (roles and
-- grants replicate). invmon also opens every transaction READ ONLY; this is the third fence.
CREATE ROLE invmon LOGIN PASSWORD 'change-me';
GRANT CONNECT ON DATABASE app TO invmon;
GRANT USAGE ON SCHEMA public TO invmon;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO invmon;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO invmon;
ALTER ROLE invmon SET default_transaction_read_only = on;
-- pg_stat_activity and replay lag functions need no extra grants; pg_monitor shows other
-- sessions' queries too, which helps when a slow invariant is investigated:
-- GRANT pg_monitor TO invmon;
