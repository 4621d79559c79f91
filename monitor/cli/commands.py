"""The `invmon` command line. Thin: it parses flags, calls the core and prints.

The commands live by family: evaluating.py (check, run), incidents.py (status, history,
ack, unack, snooze, unquarantine), muting.py (mute, unmute, mutes), writing.py (explain,
test, init, new, lint, demo), store_commands.py (store status, store migrate, store backup);
options.py and resolving.py hold what they share. See options.py for the exit codes.
"""

from __future__ import annotations

import click

from monitor.cli import evaluating, incidents, muting, store_commands, writing
from monitor.cli.options import quiet_libraries
from monitor.version import commit, version


@click.group()
@click.version_option(
    version, prog_name="invmon", message=f"%(prog)s, version %(version)s (commit {commit})"
)
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
    muting.mute,
    muting.unmute,
    muting.mutes,
    writing.explain,
    writing.test_command,
    writing.init,
    writing.new,
    writing.lint,
    writing.demo,
    store_commands.store,
):
    main.add_command(_command)


if __name__ == "__main__":
    main()
