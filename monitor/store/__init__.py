"""invmon's own state: storage (SQLite or PostgreSQL), its migrations, the records kept, the
claim rule a fleet shares, and the pure rules that belong to stored state (`incidents`, `acks`).

`incidents.decide` and `acks` are pure; `storage`, `state`, `state_queries` and `claims` do the
I/O. Never touches the monitored database.
"""
