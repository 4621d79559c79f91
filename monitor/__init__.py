"""invmon: SQL invariants that return offending rows, run against a read replica on a schedule."""
