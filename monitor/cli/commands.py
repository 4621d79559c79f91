"""The `invmon` command line. Thin: it parses flags, calls the core and prints.

The commands live by family: evaluating.py (check), running.py (run), incidents.py
(status, history, ack, unack, snooze, unquarantine), muting.py (mute, unmute, mutes),
writing.py (explain, test, init, new, lint, demo), store_commands.py (store status, store
migrate, store backup); options.py and resolving.py hold what they share. See options.py
for the exit codes.

A command's module is imported only when that command is asked for: `invmon --help` and
`invmon lint` do not pay for the database driver, the scheduler, Slack's client or the web
page (tests/cli/test_startup.py holds them to it). `COMMANDS` says where each one lives and
carries the first paragraph of its help, which `invmon --help` lists without importing it.
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
from collections.abc import Iterator, MutableMapping
from types import ModuleType

import click

# name: (module, attribute, the first paragraph of its help, as its docstring says it)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "check": (
        "monitor.cli.evaluating",
        "check",
        "Evaluate every invariant once and exit 0 (all hold), 1 (violated) or 2 (error).",
    ),
    "run": (
        "monitor.cli.running",
        "run",
        "Run the daemon: evaluate every invariant on its schedule until SIGTERM.",
    ),
    "status": (
        "monitor.cli.incidents",
        "status",
        "Open incidents and each invariant's last run, from the state store.",
    ),
    "history": (
        "monitor.cli.incidents",
        "history",
        "Recent runs and incidents of one invariant, or of every invariant of a target.",
    ),
    "ack": (
        "monitor.cli.incidents",
        "ack",
        "Acknowledge an incident (for when Slack is down).",
    ),
    "unack": (
        "monitor.cli.incidents",
        "unack",
        "Remove an incident's acknowledgement; reminders resume.",
    ),
    "snooze": (
        "monitor.cli.incidents",
        "snooze",
        "Silence an open incident's reminders and change notices for DURATION (e.g. 4h). "
        "For planned work on an invariant, a folder or a target, see `invmon mute`.",
    ),
    "unquarantine": (
        "monitor.cli.incidents",
        "unquarantine",
        "Schedule again an invariant quarantined for overrunning its timeout.",
    ),
    "mute": (
        "monitor.cli.muting",
        "mute",
        "Silence notifications for planned work: SELECTOR is a name, a folder/ or a glob. "
        "Runs and incidents are still recorded; what is still open when it ends posts once.",
    ),
    "unmute": (
        "monitor.cli.muting",
        "unmute",
        "End mute ID now: what it held that is still open posts once.",
    ),
    "mutes": (
        "monitor.cli.muting",
        "mutes",
        "The mutes active or scheduled (newest first).",
    ),
    "explain": (
        "monitor.cli.writing",
        "explain",
        "Planner cost of each invariant; exit 1 when one is over its max_cost.",
    ),
    "test": (
        "monitor.cli.writing",
        "test_command",
        "Run each invariant's fixture cases (NAME.test.yaml) in a throwaway database.",
    ),
    "init": (
        "monitor.cli.writing",
        "init",
        "Start a repository of invariants: config, .gitignore, schema placeholder, an example "
        "invariant with its cases, the PR workflow, its check script, PR template, CODEOWNERS, "
        "and the scripts that make and check invmon's least-privilege database role.",
    ),
    "new": (
        "monitor.cli.writing",
        "new",
        "Write NAME.sql and NAME.test.yaml in the invariants folder, from the schema.",
    ),
    "lint": (
        "monitor.cli.writing",
        "lint",
        "Validate every invariant file and its fixture; print all problems as path:line: "
        "message. The folder is DIRECTORY or --invariants, as for the other commands.",
    ),
    "demo": (
        "monitor.cli.writing",
        "demo",
        "Start a throwaway PostgreSQL with planted violations and run every shipped invariant.",
    ),
    "store": (
        "monitor.cli.store_commands",
        "store",
        "The state store: its schema version and size, migrations, a backup and its restore.",
    ),
}


def import_quietly(module: str) -> ModuleType:
    """Import a command's module with the cyclic garbage collector paused, then move all
    that was loaded out of its sight (`gc.freeze`). Importing `check`'s modules allocates
    hundreds of thousands of objects and frees almost none, so the collector's 120-odd runs
    on the way found nothing and cost 4.7% of the import's instructions (callgrind) and
    about 30 ms of a command's start; frozen, the modules' objects are never walked again
    by a full collection in a long-lived daemon either. Process-wide, so only here, where
    the process is the `invmon` command.

    For the same reason, pydantic is told here that it has no plugins to look for, unless
    the environment says otherwise: its first model would scan every installed package's
    entry points for some, 1.5% of `check`'s instructions (callgrind), and nothing in invmon
    uses one."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    enabled = gc.isenabled()
    gc.disable()
    try:
        return importlib.import_module(module)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands by name, each imported from its module when first looked up. Its
    names (and summaries) are known without importing anything, so a group lists them and
    finds the one typed at no cost; `group.commands[name]` and `.items()` work as for any
    group (they import what they return)."""

    def __init__(self, where: dict[str, tuple[str, str, str]]) -> None:
        self._where = dict(where)
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        command = self._loaded.get(name)
        if command is None:
            module, attribute, _ = self._where[name]  # KeyError: no such command
            command = getattr(import_quietly(module), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{module}.{attribute} is not a click command")
            self._loaded[name] = command
        return command

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command
        self._where.pop(name, None)

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._loaded.pop(name, None)
        self._where.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._loaded or name in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({*self._loaded, *self._where}))

    def __len__(self) -> int:
        return len({*self._loaded, *self._where})

    def summary(self, name: str) -> str | None:
        """The first paragraph of the help of a command not imported yet; None once it is
        (its own help says it then)."""
        if name in self._loaded:
            return None
        return self._where[name][2]


# Ctrl-C: 128 + SIGINT, as a shell reports a command the signal ended. click's own exit for
# it is 1, which here is a finding (a violation): a script would have paged on a Ctrl-C.
EXIT_INTERRUPTED = 130


class LazyGroup(click.Group):
    """A group of LazyCommands: its `--help` lists a command not imported yet by the
    summary COMMANDS holds for it (shortened as click shortens a command's own help)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            # What the command had under way was ended on its way out (check cancels its
            # queries on their servers, execution/check.py); `run` takes SIGINT as a stop.
            click.echo("\ninvmon: interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        commands = self.commands
        if not isinstance(commands, LazyCommands):
            super().format_commands(ctx, formatter)
            return
        listed: list[tuple[str, str | click.Command]] = []
        for name in self.list_commands(ctx):
            summary = commands.summary(name)
            if summary is not None:
                listed.append((name, summary))
            elif not commands[name].hidden:
                listed.append((name, commands[name]))
        if not listed:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in listed)
        rows = [
            (
                name,
                # shortened as click shortens a command's own help
                click.Command(name, help=about).get_short_help_str(limit)
                if isinstance(about, str)
                else about.get_short_help_str(limit),
            )
            for name, about in listed
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def quiet_libraries() -> None:
    # sqlglot warns on stderr when it falls back to a generic Command for statements lint
    # rejects anyway; the pool logs every failed connect, which `check` reports itself.
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    # As click.version_option, but the version (and the commit, which may ask git) is
    # worked out only when asked for.
    if not value or ctx.resilient_parsing:
        return
    from monitor.version import commit, version

    click.echo(f"invmon, version {version} (commit {commit})", color=ctx.color)
    ctx.exit()


@click.group(cls=LazyGroup, commands=LazyCommands(COMMANDS))
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def main() -> None:
    """invmon: invariants as SQL queries that return offending rows."""
    quiet_libraries()


if __name__ == "__main__":
    main()
