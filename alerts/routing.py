"""Which channel an incident's messages go to. Pure."""

from __future__ import annotations

from monitor.config import SlackConfig


def channel_for(
    config: SlackConfig, severity: str | None, owner: str | None, header_channel: str | None
) -> str:
    """The file's own `channel` header first, then its owner's route, then its severity's,
    then the default channel."""
    if header_channel:
        return header_channel
    if owner and owner in config.routes.owner:
        return config.routes.owner[owner]
    for level, channel in config.routes.severity.items():
        if level == severity:
            return channel
    return config.channel
