"""How a delivery's failed call counts and when it is tried again: an exception no
transport classified, taken as a permanent failure, and the backoff between tries. Pure.
"""

from __future__ import annotations

from datetime import timedelta

from alerts.transport import TransportError


def unexpected(error: BaseException) -> TransportError:
    """An exception no transport classified, as the permanent failure it is taken for."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    name = type(error).__name__
    return TransportError(f"{name}: {text}" if text else name, "permanent")


def backoff(attempts: int, ceiling: timedelta) -> timedelta:
    """2s, 4s, 8s, ... up to `ceiling`."""
    return min(ceiling, timedelta(seconds=2 ** min(attempts, 16)))
