"""The fence: proof that a query only reads.

PostgreSQL's own parser (pglast) and catalog decide what a statement does; this package judges
the tree and the functions it calls, and checks that a role cannot write. Pure except
`live_catalog` and `role_check` (ask the catalog), `builtin_catalog` (reads the shipped
table) and `builtins_table` (generates it). Imports nothing else of invmon but shared
helpers.
"""
