"""What an author runs before a PR lands: lint, `invmon test` with fixtures, schema checks,
explain, scaffolding and the CI annotations. Runs against throwaway databases, never a
monitored one, and never touches the daemon's state.
"""
