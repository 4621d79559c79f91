"""The file format: one `.sql` file per invariant, its header, and the folder that holds them.

Parsing, validating and selecting definitions is pure; the loader reads files within size and
time bounds and reports a bad file by name without stopping the rest. Depends on the fence
(every query is judged on load) and on sources (headers may name a source).
"""
