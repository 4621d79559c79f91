"""A small chart of offending-row counts over recent runs, as SVG geometry. Pure.

Only numbers this module computes reach the SVG (no name, no value from a row), and the
chart has a text equivalent (`label`) for screen readers and for anyone the line tells
nothing. A run that counted nothing (error, stale) breaks the line instead of drawing a
fake zero, and is marked below it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from monitor.text import counted

WIDTH = 120
HEIGHT = 28
PAD = 3


@dataclass(frozen=True)
class Mark:
    x: float
    y: float
    kind: str  # "violated", "ok" or "unknown" (a run that counted nothing)


@dataclass(frozen=True)
class Sparkline:
    width: int
    height: int
    paths: tuple[str, ...]  # SVG path data, one per unbroken stretch of counted runs
    marks: tuple[Mark, ...]  # the last run, and each run that counted nothing
    label: str
    peak: int


def _fmt(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def sparkline(counts: Sequence[int | None]) -> Sparkline | None:
    """Oldest first. None when there is no run to draw."""
    if not counts:
        return None
    known = [c for c in counts if c is not None]
    peak = max(known, default=0)
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    step = inner_w / max(1, len(counts) - 1)

    def y_of(count: int) -> float:
        return PAD + inner_h * (1 - (count / peak if peak else 0))

    paths: list[str] = []
    current: list[str] = []
    marks: list[Mark] = []
    for i, count in enumerate(counts):
        x = PAD + i * step if len(counts) > 1 else WIDTH / 2
        if count is None:
            if current:
                paths.append(" ".join(current))
                current = []
            marks.append(Mark(x, HEIGHT - 1.5, "unknown"))
            continue
        current.append(f"{'M' if not current else 'L'}{_fmt(x)},{_fmt(y_of(count))}")
    if current:
        paths.append(" ".join(current))
    last = counts[-1]
    if last is not None:
        x = PAD + (len(counts) - 1) * step if len(counts) > 1 else WIDTH / 2
        marks.append(Mark(x, y_of(last), "violated" if last else "ok"))
    return Sparkline(WIDTH, HEIGHT, tuple(paths), tuple(marks), _label(counts, known), peak)


def _label(counts: Sequence[int | None], known: Sequence[int]) -> str:
    runs = counted(len(counts), "run")
    if not known:
        return f"Offending rows over the last {runs}: none counted."
    first, last = known[0], known[-1]
    gaps = len(counts) - len(known)
    unknown = f"; {counted(gaps, 'run')} counted nothing" if gaps else ""
    return (
        f"Offending rows over the last {runs}: {first:,} at first, {last:,} now, "
        f"at most {max(known):,}{unknown}."
    )
