"""What changed between two configs, key by key, and what a running daemon takes of a new
one on SIGHUP. Pure: Config values in, dotted keys and a Config out; never a value in what
it says, since a key may hold a secret (a DSN, a token).

The live keys (LIVE) are those whose readers look them up each time they use them: the log
settings, the Slack routes and timings the planner reads per event, who may click, the
page's token and refresh, a database session's settings read per run, the invariants'
folder and defaults (applied by the reload that follows). Every other key is fixed when the
daemon starts (a listener bound, a pool opened, a transport built, a job scheduled): a
change to it is kept aside and logged as needing a restart.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from monitor.config.model import Config

# Section -> the fields of it taken live; `()` means the whole section.
LIVE: dict[str, tuple[str, ...]] = {
    "log": (),
    "defaults": (),
    "invariants": (),
    "schema_path": (),  # for lint and test only: nothing in the daemon reads it
    "max_cost": (),  # for explain only
    "slack": (
        "channel",
        "routes",
        "repeat_interval",
        "digest_threshold",
        "digest_window",
        "digest_group_interval",
        "thread_update_interval",
        "ack_allowlist",
    ),
    "http": ("page_token", "page_refresh"),
    "database": (
        "lock_timeout",
        "recovery_conflict_retries",
        "retry_backoff",
        "temp_file_limit",
        "keys_first",
    ),
}
# A target's own session settings, for each target both configs have.
LIVE_TARGET: tuple[str, ...] = ("lock_timeout", "temp_file_limit")


@dataclass(frozen=True)
class ConfigChange:
    live: tuple[str, ...]  # taken at once
    restart: tuple[str, ...]  # kept as they were until the daemon restarts

    def __bool__(self) -> bool:
        return bool(self.live or self.restart)


def config_change(old: Config, new: Config) -> ConfigChange:
    changed = changed_keys(_tree(old), _tree(new))
    live = tuple(k for k in changed if is_live(k, old, new))
    return ConfigChange(live, tuple(k for k in changed if k not in live))


def is_live(key: str, old: Config, new: Config) -> bool:
    section, _, rest = key.partition(".")
    if section == "targets":
        name, _, field = rest.partition(".")
        both = name in old.targets and name in new.targets
        return both and field.split(".")[0] in LIVE_TARGET
    if section not in LIVE:
        return False
    fields = LIVE[section]
    return not fields or rest.split(".")[0] in fields


def with_live(old: Config, new: Config) -> Config:
    """`old` with the live keys of `new`: what a daemon runs with after a SIGHUP."""

    def taken(before: BaseModel, after: BaseModel, fields: tuple[str, ...]) -> BaseModel:
        return before.model_copy(update={f: getattr(after, f) for f in fields})

    update: dict[str, Any] = {}
    for section, fields in LIVE.items():
        before, after = getattr(old, section), getattr(new, section)
        update[section] = taken(before, after, fields) if fields else after
    update["targets"] = {
        name: taken(t, new.targets[name], LIVE_TARGET) if name in new.targets else t
        for name, t in old.targets.items()
    }
    return old.model_copy(update=update)


def changed_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, ...]:
    """The dotted keys whose values differ, sorted; a whole list is one key."""
    before, after = dict(_leaves(old)), dict(_leaves(new))
    return tuple(sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)))


def _tree(config: Config) -> dict[str, Any]:
    return config.model_dump(mode="json")


def _leaves(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):  # an empty one has no leaves: nothing to differ
            yield from _leaves(value, dotted + ".")
        else:
            yield dotted, value
