"""Loading the invariants folder into a running daemon: what a (re)load changes, and what
it tells people. A file that fails validation, or that the monitored database's catalog
refuses, is reported (a log line and an `invalid_file` incident) and, if an earlier version
of it was loaded, that version keeps running; a removed file's open incidents are closed
as retired (never resolved: nothing says what they found was fixed).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Set
from datetime import datetime

from monitor.config import Config
from monitor.daemon.databases import Databases
from monitor.daemon.services import Services
from monitor.daemon.slots import latest_slot, period
from monitor.invariants.definitions import Definitions, Reload, diff
from monitor.invariants.header import DEFAULT_TARGET, readable_header
from monitor.invariants.loader import (
    RESERVED_PREFIX,
    Invariant,
    LoadMemo,
    LoadResult,
    bind_target,
    load_directory,
    name_for,
)
from monitor.problems import Problem
from monitor.store.context import IncidentContext
from monitor.store.incidents import RETIRABLE
from monitor.text import counted

log = logging.getLogger("invmon.daemon")

# Puts the new set in place; the daemon does it under its own lock.
Install = Callable[[dict[str, Invariant]], None]


class Reloader:
    def __init__(
        self,
        config: Config,
        databases: Databases,
        definitions: Definitions,
        install: Install,
        services: Services,
    ) -> None:
        self.config = config
        self.databases = databases
        self.definitions = definitions
        self.install = install
        self.store, self.health = services.store, services.health
        self.metrics, self.clock = services.metrics, services.clock
        self.memo = LoadMemo()  # a reload parses only the files that changed
        # Guards _said_invalid: each invalid file's problems as last logged, so an unchanged
        # one is not logged again in full at every SIGHUP (an SRE's review), only named.
        self._said_lock = threading.Lock()
        self._said_invalid: dict[str, tuple[str, ...]] = {}

    def reload(self) -> Reload:
        directory = self.config.invariants
        running = self.definitions.current
        if running and (not directory.is_dir() or not any(directory.rglob("*.sql"))):
            # A deploy swapping the checkout, an unmounted volume: not a reason to stop
            # checking everything. Keep what runs and say so.
            log.error(
                "invariants folder %s is missing or empty; keeping the %d loaded invariants",
                directory,
                len(running),
            )
            return Reload(kept_previous=sorted(running))
        self._check_roles()
        loaded = load_directory(directory, self.config.loading(with_database=True), self.memo)
        invalid = self._problems_by_name(loaded)
        # The fence again, against the monitored database's own catalog: what lint could
        # not know (user-defined and extension functions, views) is decided here.
        refused = self.databases.vet(loaded.invariants)
        for name, problems in refused.items():
            invalid.setdefault(name, []).extend(problems)
        valid = {i.name: i for i in loaded.invariants if i.name not in refused}
        return self._apply(valid, invalid)

    def _check_roles(self) -> None:
        """What each target's role can do, read again: a refused target is said once per
        (re)load here, and each of its runs is an error saying why (evaluation.py)."""
        for name, answer in self.databases.check_roles().items():
            if isinstance(answer, str):
                log.warning(
                    "cannot read what the role of target %s can do (%s); it is read again "
                    "before its first run",
                    name,
                    answer,
                )
                continue
            fields = {"fields": {"target": name, "role": answer.role}}
            if (refusal := answer.refusal()) is not None:
                log.error("%s", refusal, extra=fields)
            elif (allowance := answer.allowance()) is not None:
                log.warning("%s", allowance, extra=fields)

    def _record(
        self,
        valid: Set[str],
        invalid: dict[str, list[Problem]],
        removed: list[str],
        now: datetime,
    ) -> None:
        for name, problems in invalid.items():
            detail = "\n".join(str(p) for p in problems)
            context = self._invalid_context(name, problems)
            self.store.record_condition("invalid_file", name, True, now, detail, context)
        # A file that validates again: its invalid-file incident resolves ("FILE FIXED").
        # Only one that loads now: a file deleted while invalid was said to be fixed, and
        # "validates again"; it is retired with the removed ones below.
        for incident in self.store.open_incidents():
            if incident.kind == "invalid_file" and incident.invariant in valid:
                self.store.record_condition("invalid_file", incident.invariant, False, now)
        for name in removed:
            # Retired, not resolved: the file went while its incident was open, so what
            # it found is not known to be fixed. Logged so the removal is seen as such.
            for event in self.store.retire(name, now):
                log.warning(
                    "invariant removed while an incident was open: incident retired (%s)",
                    event.payload.get("reason"),
                    extra={
                        "fields": {
                            "invariant": name,
                            "incident": event.incident_id,
                            "event": event.kind,
                        }
                    },
                )

    def _orphans(self, valid: dict[str, Invariant], invalid: dict[str, list[Problem]]) -> list[str]:
        """Invariants with an incident open that no file in the folder names any more.

        Not every invariant the store knows: a fleet member with an older folder (a rolling
        deploy) would mark the new files removed, and a run of one in flight on a newer
        member would not be stored (the quick review of this change found it). So a file
        deleted while no daemon ran, while it held, stays in `status` until it is marked."""
        known = {i.invariant for i in self.store.open_incidents() if i.kind in RETIRABLE}
        return sorted(
            name
            for name in known
            if name not in valid
            and name not in invalid
            and not name.startswith(RESERVED_PREFIX)  # invmon's own: no file
        )

    def _invalid_context(self, name: str, problems: list[Problem]) -> IncidentContext:
        """A file that does not load is bound to a target by the rule a valid one follows
        and keeps what its header still says (severity, owner, …), so its incident is shown
        and routed where the file belongs, not on `default` as a warning."""
        limit = self.config.limits.file_bytes
        try:
            with problems[0].path.open("rb") as file:
                raw = file.read(limit + 1)
        except OSError:
            raw = b""
        said = readable_header(raw.decode("utf-8", "replace")) if len(raw) <= limit else {}
        targets = self.config.resolved_targets()
        ceilings = {n: t.statement_timeout for n, t in targets.items()}
        target = bind_target(said.get("target"), name, ceilings) or DEFAULT_TARGET
        return IncidentContext(
            severity=said.get("severity") or self.config.defaults.severity,
            description=said.get("description"),
            owner=said.get("owner") or (targets[target].owner if target in targets else None),
            runbook=said.get("runbook"),
            channel=said.get("channel"),
            target=target,
            target_channel=targets[target].channel if target in targets else None,
        )

    def _problems_by_name(self, loaded: LoadResult) -> dict[str, list[Problem]]:
        by_name: dict[str, list[Problem]] = {}
        for problem in loaded.errors:
            try:
                name = name_for(problem.path, self.config.invariants)
            except ValueError:
                name = str(problem.path)
            by_name.setdefault(name, []).append(problem)
        return by_name

    def _apply(self, valid: dict[str, Invariant], invalid: dict[str, list[Problem]]) -> Reload:
        now = self.clock()
        running, change = diff(self.definitions.current, valid, invalid)
        self.install(running)
        now_said = {name: tuple(str(p) for p in problems) for name, problems in invalid.items()}
        with self._said_lock:
            unchanged = sorted(n for n, s in now_said.items() if self._said_invalid.get(n) == s)
            self._said_invalid = now_said
        if unchanged:
            listed = ", ".join(unchanged[:20]) + (" …" if len(unchanged) > 20 else "")
            log.warning(
                "%s still invalid, as logged before: %s",
                counted(len(unchanged), "file"),
                listed,
                extra={"fields": {"invariants": unchanged}},
            )
        for name, problems in invalid.items():
            if name in unchanged:
                continue
            for problem in problems:
                log.error(
                    "invalid invariant file: %s",
                    problem,
                    extra={
                        "fields": {"invariant": name, "kept_previous": name in change.kept_previous}
                    },
                )
        self.metrics.invalid_files.set(len(invalid))
        for name, inv in running.items():
            slot = latest_slot(inv.schedule, now)
            self.metrics.scheduled(name, inv.target, period(inv.schedule, slot).total_seconds())
        removed = change.removed
        with self.health.guard("recording what the reload changed"):
            if valid or invalid:
                # Also a file no load installed (removed while no daemon ran, as a restart
                # is how many deploys reload; or invalid since the start, never running) is
                # retired once it is gone from the folder; an empty folder (an unmounted
                # volume) retires nothing. One that holds only invalid files does: a
                # deleted invalid file's incident stayed open there.
                removed = sorted(set(removed) | set(self._orphans(valid, invalid)))
            self._record(valid.keys(), invalid, removed, now)
        # Every one retired, orphans too: a run of one in flight at its removal had put its
        # series back, and they stayed until a restart.
        for name in removed:
            self.metrics.forget(name)
        if change.added or change.updated or change.removed:
            log.info(
                "invariants loaded",
                extra={
                    "fields": {
                        "added": change.added,
                        "updated": change.updated,
                        "removed": change.removed,
                        "running": len(running),
                    }
                },
            )
        return change
