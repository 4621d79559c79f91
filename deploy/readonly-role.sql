-- A login role that can only read, for invmon on the replica. Run on the primary (roles and
-- grants replicate). invmon also opens every transaction READ ONLY; this is the third fence.
CREATE ROLE invmon LOGIN PASSWORD 'change-me';
GRANT CONNECT ON DATABASE app TO invmon;
GRANT USAGE ON SCHEMA public TO invmon;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO invmon;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO invmon;
ALTER ROLE invmon SET default_transaction_read_only = on;
-- Replica freshness: invmon reads pg_stat_wal_receiver to tell a caught-up standby from one
-- whose link broke. Its columns are visible only with this role; without it invmon falls
-- back to the age of the last replayed commit, which reads as stale on an idle primary.
GRANT pg_read_all_stats TO invmon;
