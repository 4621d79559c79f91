"""The fence: proof that a query only reads.

PostgreSQL's own parser (pglast) and catalog decide what a statement does; this package judges
the tree and the functions it calls, and checks that a role cannot write. Pure except
`role_check` (asks the catalog) and `builtins_table` (generates the shipped table). Imports
nothing else of invmon but shared helpers.
"""
