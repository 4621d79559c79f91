"""lint's judgement of SQL: every forbidden construct is refused with a reason and a line,
and ordinary analytical SQL passes."""

from __future__ import annotations

import pytest

from monitor.validate import validate_sql

REJECTED = {
    "two statements": ("SELECT 1;\nSELECT 2", 1, "exactly one statement, found 2"),
    "data-modifying CTE": (
        "WITH gone AS (\n  DELETE FROM refunds RETURNING *\n)\nSELECT * FROM gone",
        2,
        "data-modifying DELETE",
    ),
    "update CTE": (
        "WITH x AS (UPDATE t SET a = 1 RETURNING a) SELECT * FROM x",
        1,
        "data-modifying UPDATE",
    ),
    "insert CTE": ("WITH x AS (INSERT INTO t VALUES (1) RETURNING *) SELECT 1", 1, "INSERT"),
    "select into": ("SELECT *\nINTO copy_of_refunds\nFROM refunds", 2, "SELECT ... INTO"),
    "for update": ("SELECT *\nFROM jobs\nFOR UPDATE", 3, "FOR UPDATE takes row locks"),
    "for share": ("SELECT * FROM jobs FOR SHARE", 1, "FOR SHARE"),
    "for no key update": ("SELECT * FROM jobs FOR NO KEY UPDATE", 1, "FOR NO KEY UPDATE"),
    "for key share": ("SELECT * FROM jobs FOR KEY SHARE", 1, "FOR KEY SHARE"),
    "copy": ("COPY refunds TO STDOUT", 1, "COPY statement is not allowed"),
    "call": ("CALL settle_all()", 1, "CALL statement is not allowed"),
    "do": ("DO $$ BEGIN PERFORM 1; END $$", 1, "DO statement is not allowed"),
    "set": ("SET statement_timeout = 0", 1, "SET statement is not allowed"),
    "reset": ("RESET ALL", 1, "RESET statement is not allowed"),
    "insert": ("INSERT INTO t VALUES (1)", 1, "INSERT statement is not allowed"),
    "update": ("UPDATE t SET a = 1", 1, "UPDATE statement is not allowed"),
    "delete": ("DELETE FROM t", 1, "DELETE statement is not allowed"),
    "truncate": ("TRUNCATE t", 1, "TRUNCATE statement is not allowed"),
    "create": ("CREATE TABLE t (a int)", 1, "CREATE statement is not allowed"),
    "drop": ("DROP TABLE t", 1, "DROP statement is not allowed"),
    "alter": ("ALTER TABLE t ADD COLUMN b int", 1, "ALTER statement is not allowed"),
    "grant": ("GRANT SELECT ON t TO x", 1, "GRANT statement is not allowed"),
    "explain": ("EXPLAIN SELECT 1", 1, "EXPLAIN statement is not allowed"),
    "pg_terminate_backend": (
        "SELECT pid,\n  pg_terminate_backend(pid)\nFROM pg_stat_activity",
        2,
        "pg_terminate_backend() terminates another session",
    ),
    "pg_cancel_backend": ("SELECT pg_cancel_backend(1)", 1, "pg_cancel_backend()"),
    "set_config": ("SELECT set_config('work_mem', '1GB', false)", 1, "set_config()"),
    "nextval": ("SELECT nextval('refund_seq')", 1, "nextval() advances a sequence"),
    "setval": ("SELECT setval('refund_seq', 1)", 1, "setval()"),
    "advisory lock": ("SELECT pg_advisory_lock(42)", 1, "pg_advisory_lock() takes an advisory"),
    "advisory xact lock": ("SELECT pg_advisory_xact_lock(1)", 1, "pg_advisory_xact_lock()"),
    "try advisory lock": ("SELECT pg_try_advisory_lock(1)", 1, "pg_try_advisory_lock()"),
    "dblink": ("SELECT * FROM dblink('host=x', 'select 1') AS t(a int)", 1, "dblink()"),
    "dblink_exec": ("SELECT dblink_exec('delete from t')", 1, "dblink_exec()"),
    "lo_import": ("SELECT lo_import('/etc/passwd')", 1, "lo_import() touches large objects"),
    "pg_read_file": ("SELECT pg_read_file('postgresql.conf')", 1, "pg_read_file()"),
    "pg_read_binary_file": ("SELECT pg_read_binary_file('x')", 1, "pg_read_binary_file()"),
    "pg_ls_dir": ("SELECT pg_ls_dir('.')", 1, "pg_ls_dir()"),
    "pg_sleep": ("SELECT 1\nWHERE pg_sleep(10) IS NULL", 2, "pg_sleep() sleeps"),
    "qualified pg_sleep": ("SELECT pg_catalog.pg_sleep(1)", 1, "pg_sleep()"),
    "unicode-escaped name": (
        'SELECT 1\nWHERE U&"\\0070g_sleep"(2) IS NULL',
        2,
        'U&"..." escaped identifiers are not allowed',
    ),
    "sql text in query_to_xml": (
        "SELECT query_to_xml('SELECT pg_sleep(2)', true, true, '')",
        1,
        "query_to_xml() runs the SQL text it is given",
    ),
    "sql text in ts_stat": ("SELECT * FROM ts_stat('SELECT 1')", 1, "ts_stat() runs the SQL"),
    "replication slot": (
        "SELECT pg_create_physical_replication_slot('x')",
        1,
        "pg_create_physical_replication_slot()",
    ),
    "stats reset": ("SELECT pg_stat_reset()", 1, "pg_stat_reset() resets statistics"),
    "logical message": ("SELECT pg_logical_emit_message(true, 'a', 'b')", 1, "pg_logical_"),
    "backup": ("SELECT pg_backup_start('x')", 1, "pg_backup_start() starts or stops a backup"),
    "ls waldir": ("SELECT * FROM pg_ls_waldir()", 1, "pg_ls_waldir()"),
    "unparseable": ("SELEC * FROM refunds", 1, "cannot parse the query"),
    "unbalanced": ("SELECT (1\nFROM t", 2, "cannot parse the query"),
    "empty": ("-- only a comment\n", 1, "has no query"),
}


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_each_forbidden_construct_is_rejected_with_its_line_and_reason(case: str) -> None:
    sql, line, fragment = REJECTED[case]
    problems = validate_sql(sql)
    assert len(problems) == 1, [p.message for p in problems]
    assert problems[0].line == line
    assert fragment in problems[0].message


ACCEPTED = {
    "cte and window": """
        WITH ranked AS (
          SELECT r.*, row_number() OVER (PARTITION BY dispute_id ORDER BY created_at) AS n
          FROM refunds r WHERE status = 'settled'
        )
        SELECT dispute_id, count(*) FROM ranked GROUP BY dispute_id HAVING count(*) > 1""",
    "lateral": """
        SELECT a.account_id, l.total
        FROM accounts a
        CROSS JOIN LATERAL (SELECT sum(amount_eur) AS total FROM credit_log c
                            WHERE c.account_id = a.account_id) l
        WHERE l.total IS DISTINCT FROM a.credit_balance_eur""",
    "filter": "SELECT kind, count(*) FILTER (WHERE state = 'failed') AS failed FROM jobs "
    "GROUP BY kind HAVING count(*) FILTER (WHERE state = 'failed') > 10",
    "distinct on": "SELECT DISTINCT ON (account_id) account_id, created_at FROM credit_log "
    "ORDER BY account_id, created_at DESC",
    "generate_series": "SELECT d::date FROM generate_series(now() - interval '7 days', now(), "
    "interval '1 day') AS d WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE created_at::date = d)",
    "jsonb operators": "SELECT id FROM events WHERE payload ->> 'kind' = 'refund' "
    "AND payload @> '{\"settled\": true}'::jsonb AND payload ? 'amount' AND payload #>> '{a,b}' "
    "IS NULL",
    "casts": "SELECT id::text, CAST(amount AS numeric(12, 2)), created_at::date FROM refunds",
    "union": "SELECT object_key FROM receipt_objects EXCEPT SELECT receipt_key FROM invoices "
    "UNION ALL SELECT 'x'",
    "intersect": "SELECT 1 INTERSECT SELECT 1",
    "values": "VALUES (1, 'a'), (2, 'b')",
    "parenthesised": "(SELECT 1)",
    "trailing semicolon and comments": "-- leading comment\nSELECT 1 -- why\n;",
    "comment after the semicolon": "SELECT 1; -- trailing comment",
    "U& inside a string is just text": "SELECT 'U&\"x' AS label",
    "now with interval": "SELECT job_id FROM jobs WHERE lease_until < now() - interval '2 minutes'",
    "aggregates over arrays": "SELECT dispute_id, array_agg(refund_id ORDER BY refund_id) "
    "FROM refunds GROUP BY dispute_id",
    "exists subquery": "SELECT i.invoice_id FROM invoices i WHERE NOT EXISTS "
    "(SELECT 1 FROM receipt_objects o WHERE o.object_key = i.receipt_key)",
    "coalesce and case": "SELECT CASE WHEN coalesce(a, 0) > 0 THEN 'pos' ELSE 'neg' END FROM t",
    "string functions": "SELECT lower(email), split_part(email, '@', 2), "
    "regexp_replace(name, '\\s+', ' ', 'g') FROM users",
    "window frame": "SELECT id, sum(x) OVER (ORDER BY id ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) "
    "FROM t",
    "catalog read": "SELECT relname FROM pg_stat_user_tables WHERE n_dead_tup > 1000000",
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_ordinary_analytical_sql_is_accepted(case: str) -> None:
    assert validate_sql(ACCEPTED[case]) == []


def test_several_problems_in_one_query_are_all_reported_in_line_order() -> None:
    sql = "SELECT pg_sleep(1),\n  nextval('s')\nFROM t\nFOR UPDATE"
    problems = validate_sql(sql)
    assert [(p.line, p.message.split(" ")[1]) for p in problems] == [
        (1, "pg_sleep()"),
        (2, "nextval()"),
        (4, "UPDATE"),
    ]
