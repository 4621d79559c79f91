"""The fence's declarative tables: the built-in names it knows to be harmless, or to reach
something a timeout cannot stop (libxml2, a type's input function, a setting), each with why.
Data only: fence.py judges with them."""

from __future__ import annotations

from monitor.fence.catalog import Name

# VOLATILE only because their answer changes between calls; none of them writes, signals,
# locks or reaches outside the server. Monitoring queries use them. Judged in pg_catalog
# only: a user function of the same name elsewhere is judged on its own.
HARMLESS_VOLATILE = frozenset(
    {
        "clock_timestamp",
        "timeofday",
        "random",
        "random_normal",
        "gen_random_uuid",
        "uuidv4",
        "uuidv7",
        "pg_relation_size",
        "pg_table_size",
        "pg_indexes_size",
        "pg_total_relation_size",
        "pg_database_size",
        "pg_tablespace_size",
        "pg_is_in_recovery",
        "pg_last_wal_receive_lsn",
        "pg_last_wal_replay_lsn",
        "pg_last_xact_replay_timestamp",
        "pg_current_wal_lsn",
        "pg_current_wal_insert_lsn",
        "pg_current_wal_flush_lsn",
        "pg_is_wal_replay_paused",
        "pg_get_wal_replay_pause_state",
        "pg_blocking_pids",
        "pg_safe_snapshot_blocking_pids",
        "pg_lock_status",
        "pg_xact_commit_timestamp",
        "pg_last_committed_xact",
        "pg_xact_status",
        "txid_status",
        "pg_partition_tree",
        "pg_partition_ancestors",
        "pg_jit_available",
        "pg_notification_queue_usage",
        "pg_sequence_last_value",
        "pg_prepared_xact",
        "pg_show_replication_origin_status",
        "pg_stat_get_recovery_prefetch",
        "pg_stat_get_xact_numscans",
        "pg_stat_get_xact_tuples_returned",
        "pg_stat_get_xact_tuples_fetched",
        "pg_stat_get_xact_tuples_inserted",
        "pg_stat_get_xact_tuples_updated",
        "pg_stat_get_xact_tuples_deleted",
        "pg_stat_get_xact_tuples_hot_updated",
        "pg_stat_get_xact_tuples_newpage_updated",
        "pg_stat_get_io",
        "pg_stat_get_xact_blocks_fetched",
        "pg_stat_get_xact_blocks_hit",
        "pg_stat_get_xact_function_calls",
        "pg_stat_get_xact_function_total_time",
        "pg_stat_get_xact_function_self_time",
        "pg_get_backend_memory_contexts",
        "pg_get_shmem_allocations",
        "array_shuffle",
        "array_sample",
    }
)


# The same, installed by an extension: (extension, function). Reading pg_stat_statements is
# how one finds slow queries.
HARMLESS_EXTENSION_FUNCTIONS = frozenset(
    {
        ("pg_stat_statements", "pg_stat_statements"),
        ("pg_stat_statements", "pg_stat_statements_info"),
    }
)


# PARALLEL UNSAFE but STABLE, and assigning nothing: they only read the session's state.
STATE_FREE_PARALLEL_UNSAFE = frozenset(
    {
        "current_schema",
        "current_schemas",
        "txid_current_if_assigned",
        "pg_current_xact_id_if_assigned",
    }
)


BUILTIN_TABLESAMPLE = frozenset({"bernoulli", "system", "system_rows", "system_time"})


MAX_VIEW_DEPTH = 8  # views over views; PostgreSQL itself has no limit, a fence needs one


# Functions whose work PostgreSQL cannot interrupt: XPath runs inside libxml2, which never
# checks for a cancel, so neither a statement timeout nor pg_terminate_backend stops a
# crafted expression (one ran 24 s past a 1 s timeout, and grows as N^4). Refused unless
# trusted by name in fence.allow_functions.
UNINTERRUPTIBLE = frozenset({"xpath", "xpath_exists", "xmlexists", "xmltable"})


# The same libxml2 parses XML text the same way: an internal DTD entity referenced a million
# times ran 10-20 s past a 2 s timeout and outlived pg_terminate_backend, 40,000 attributes
# on one element take seconds (libxml2 checks for duplicates pairwise). These built-in
# functions hand text to it (catalog.LIBXML_PARSERS: the live catalog finds them by their
# C symbol, whatever they are called): `xml` is the text -> xml cast, `xml_in` the type's
# input. A cast to xml, XMLPARSE, IS DOCUMENT and XMLSERIALIZE(DOCUMENT or INDENT), which
# re-parses, are refused alike (XML_SYNTAX). xmlelement, xmlforest, xmlagg, xmlconcat,
# xmlroot, xmlpi, xmlcomment and xmltext are not: they escape text, or read only the XML
# declaration with PostgreSQL's own code. A string literal can still become xml by type
# resolution (`coalesce(xml_col, '…')`), so literals are bounded in bounds.py: no DTD and
# at most MAX_STRING_CHARS characters, which parse in milliseconds.
XML_PARSING = frozenset(
    {
        "xml",
        "xml_in",
        "xml_recv",
        "xml_is_well_formed",
        "xml_is_well_formed_document",
        "xml_is_well_formed_content",
    }
)


XML_SYNTAX = {
    "xmlparse": "XMLPARSE",
    "is_document": "IS DOCUMENT",
    "xmlserialize": "XMLSERIALIZE with DOCUMENT or INDENT",
}


# Trusting this name in fence.allow_functions trusts every path of text into xml (casts,
# the input function inside a composite or an array), not XPath or XMLPARSE.
XML_TYPE = "xml"


# Functions that run the input function of a type given as a value (an OID, a type name in a
# string): a domain's CHECK or a type's input that the fence never sees named.
RUNS_A_TYPES_INPUT = frozenset(
    {
        "record_in",
        "record_recv",
        "array_in",
        "array_recv",
        "domain_in",
        "domain_recv",
        "range_in",
        "range_recv",
        "multirange_in",
        "multirange_recv",
        "pg_input_is_valid",
        "pg_input_error_info",
    }
)


# Functions that build a row of a relation's type from JSON (or hstore): they run the input
# functions and domain constraints of that relation's column types.
POPULATES_ROWS = frozenset(
    {
        "json_populate_record",
        "json_populate_recordset",
        "jsonb_populate_record",
        "jsonb_populate_recordset",
        "jsonb_populate_record_valid",
        "populate_record",
    }
)


# Settings current_setting() may read without being trusted: built-in ones that describe
# the server, the session's formats and its limits. Everything else is refused unless named
# in fence.allow_settings: custom settings (`app.jwt_secret`, set with ALTER ROLE or
# ALTER DATABASE) are where applications keep secrets, and some built-in ones hold
# connection strings or commands (primary_conninfo, archive_command).
HARMLESS_SETTINGS = frozenset(
    {
        "server_version",
        "server_version_num",
        "server_encoding",
        "client_encoding",
        "timezone",
        "datestyle",
        "intervalstyle",
        "lc_collate",
        "lc_ctype",
        "lc_messages",
        "lc_monetary",
        "lc_numeric",
        "lc_time",
        "search_path",
        "statement_timeout",
        "lock_timeout",
        "idle_in_transaction_session_timeout",
        "temp_file_limit",
        "transaction_isolation",
        "transaction_read_only",
        "default_transaction_read_only",
        "in_hot_standby",
        "is_superuser",
        "max_connections",
        "block_size",
        "integer_datetimes",
        "standard_conforming_strings",
        "application_name",
        "work_mem",
    }
)


# Relations and functions that show every setting (custom ones included) or the settings
# of every role and database: refused unless fence.allow_settings holds "*".
SETTINGS_RELATIONS = frozenset({"pg_settings", "pg_file_settings", "pg_db_role_setting"})


SETTINGS_FUNCTIONS = frozenset({"pg_show_all_settings", "pg_show_all_file_settings"})
# What shows a function's own settings (proconfig): its CREATE statement, SET clauses and all.
FUNCTION_SETTINGS_FUNCTIONS = frozenset({"pg_get_functiondef"})


ALL_SETTINGS = "*"


# Functions that run SQL handed to them as text (or read a relation named in a string), which
# the fence never sees: a view or a SECURITY DEFINER function behind them would run unjudged.
RUNS_SQL_TEXT = frozenset(
    {
        "query_to_xml",
        "query_to_xmlschema",
        "query_to_xml_and_xmlschema",
        "cursor_to_xml",
        "cursor_to_xmlschema",
        "table_to_xml",
        "table_to_xmlschema",
        "table_to_xml_and_xmlschema",
        "schema_to_xml",
        "schema_to_xmlschema",
        "schema_to_xml_and_xmlschema",
        "database_to_xml",
        "database_to_xmlschema",
        "database_to_xml_and_xmlschema",
        "ts_stat",
        "ts_rewrite",
        "crosstab",
        "crosstab2",
        "crosstab3",
        "crosstab4",
        "connectby",
    }
)


def in_system(name: Name, names: frozenset[str]) -> bool:
    """A built-in name as written: bare (pg_catalog comes first in every search path) or in
    pg_catalog."""
    return bool(name) and name[:-1] in ((), ("pg_catalog",)) and name[-1] in names
