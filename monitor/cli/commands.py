"""The `invmon` command line. Thin: it parses flags, calls the core and prints.

The commands live by family: evaluating.py (check, run), incidents.py (status, history,
ack, unack, snooze, unquarantine), writing.py (explain, test, init, new, lint, demo);
options.py and resolving.py hold what they share. See options.py for the exit codes.
"""

from __future__ import annotations

import click

from monitor import __version__
from monitor.cli import evaluating, incidents, writing
from monitor.cli.options import quiet_libraries


@click.group()
@click.version_option(__version__, prog_name="invmon")
def main() -> None:
    """invmon: invariants as SQL queries that return offending rows."""
    quiet_libraries()


for _command in (
    evaluating.check,
    evaluating.run,
    incidents.status,
    incidents.history,
    incidents.ack,
    incidents.unack,
    incidents.snooze,
    incidents.unquarantine,
    writing.explain,
    writing.test_command,
    writing.init,
    writing.new,
    writing.lint,
    writing.demo,
):
    main.add_command(_command)


if __name__ == "__main__":
    main()
