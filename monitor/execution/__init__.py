"""Running one invariant: the one query executor, the wrapper that bounds it, the offending
rows it returns, their redaction, and the result a run hands to the store.

The executor and the replica reads do I/O against the monitored database, read-only and
bounded; everything that decides (rows, redaction, quarantine) is pure. Nothing here writes
state: the store records what a run found.
"""
