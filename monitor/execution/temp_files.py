"""What one run may write to temporary files, as PostgreSQL's temp_file_limit says it. Pure:
the config checks a limit with it before any database driver is loaded."""

from __future__ import annotations

import re

from monitor.text import shorten

# What one run may write to temporary files (sorts, hashes, a function's result that spills)
# when invmon may set it: the role script's default for the role (deploy/readonly-role.sql).
DEFAULT_TEMP_FILE_LIMIT = "1GB"
_KB = {"kB": 1, "MB": 1 << 10, "GB": 1 << 20, "TB": 1 << 30}
_MAX_KB = 2**31 - 1  # PostgreSQL's own ceiling for temp_file_limit (an int of kB)
TEMP_FILE_LIMIT_HINT = (
    "the run wrote more temporary files than its limit (database.temp_file_limit, for a "
    "superuser; else the role's own temp_file_limit)"
)


def temp_file_kb(limit: str) -> int:
    """A size as PostgreSQL writes one for temp_file_limit (`1GB`, `512MB`, `64kB`), in kB;
    ValueError for anything else, so the server never refuses the value mid-run."""
    match = re.fullmatch(r"([1-9][0-9]{0,12})(kB|MB|GB|TB)", limit)
    if match is None:
        raise ValueError(
            f"write a size such as 1GB, 512MB or 64kB (PostgreSQL's units, as written), "
            f"not {shorten(limit, 40)}"
        )
    kb = int(match[1]) * _KB[match[2]]
    if kb > _MAX_KB:
        raise ValueError(f"{limit} is over PostgreSQL's largest temp_file_limit, {_MAX_KB}kB")
    return kb
