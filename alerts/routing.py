"""Which channel an incident's messages go to, and why. Pure.

The order, most specific first: the file's own `channel:` header, its owner's route, its
severity's route, its target's `channel:` (a default for that database's invariants), and
last `slack.channel`. The reason travels with the channel so the log line and `check
--format json` can say which rule chose it.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.config import SlackConfig
from monitor.store.context import IncidentContext


@dataclass(frozen=True)
class Route:
    channel: str
    why: str  # the rule that chose it, as a reader would name it


def route(config: SlackConfig, context: IncidentContext) -> Route:
    if context.channel:
        return Route(context.channel, "the file's channel:")
    owner = context.owner
    if owner and owner in config.routes.owner:
        return Route(config.routes.owner[owner], f"slack.routes.owner {owner}")
    for level, channel in config.routes.severity.items():
        if level == context.severity:
            return Route(channel, f"slack.routes.severity {level}")
    if context.target_channel:
        return Route(context.target_channel, f"targets.{context.target}.channel")
    return Route(config.channel, "slack.channel")
