"""Charts of offending-row counts, as SVG geometry. Pure: runs in, numbers out, no clock.

Two charts: the sparkline (the last few runs, one point each, on the overview's every row)
and the time chart (an invariant's page: the runs of a window, placed by when they ran).

Only numbers and words this module computes reach the SVG (no name, no value from a row),
and each chart has a text equivalent (`label`) for screen readers and for anyone the line
tells nothing. Both say their count scale as visible text: without it, a flat line at 7
and one at 7,000 look the same. A stretch of line is drawn as "ok" where both of its runs
held (count 0) and "violated" where either found rows, so a holding invariant is never
drawn in the violation colour. A run that counted nothing (error, stale) breaks the line
instead of drawing a fake zero, and is marked below it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from itertools import pairwise
from math import ceil

from monitor.text import counted

WIDTH = 120  # the sparkline's line, without its scale
HEIGHT = 28
PAD = 3
SCALE_FONT = 9  # px, the sparkline's scale (the CSS says the same)
AXIS_FONT = 11  # px, the time chart's labels (the CSS says the same)
BUCKET_PX = 3  # the time chart draws one point per this many pixels at most
TICK_ROOM = 56  # px a time label needs, with space around it
TICK_STEPS = tuple(timedelta(hours=h) for h in (1, 2, 3, 6, 12)) + tuple(
    timedelta(days=d) for d in (1, 2, 7, 14)
)
HIDDEN = "older runs not shown"
EPOCH = datetime(1970, 1, 5, tzinfo=UTC)  # a Monday at midnight: weekly ticks fall on Mondays


@dataclass(frozen=True)
class Mark:
    x: float
    y: float
    kind: str  # "violated", "ok" or "unknown" (a run that counted nothing)


@dataclass(frozen=True)
class Line:
    d: str  # SVG path data
    kind: str  # "ok": every run on it held; "violated": each segment touches a violated run


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    text: str  # a number or a date this module formatted
    anchor: str  # SVG text-anchor: "start", "middle" or "end"


@dataclass(frozen=True)
class Sparkline:
    width: int
    height: int
    lines: tuple[Line, ...]
    marks: tuple[Mark, ...]  # the last run, each run that counted nothing, each lone run
    scale: tuple[Label, ...]  # the peak at the top and 0 at the bottom, right of the line
    label: str
    peak: int


@dataclass(frozen=True)
class Bucket:
    """The runs of one slice of a window: how many, the most rows one found, and whether
    one counted nothing (so an error hidden among counted runs is still marked)."""

    runs: int
    peak: int | None  # None: no run in it counted
    errored: bool


@dataclass(frozen=True)
class TimeChart:
    width: int
    height: int
    left: float  # the plot area
    top: float
    right: float
    bottom: float
    lines: tuple[Line, ...]
    marks: tuple[Mark, ...]
    scale: tuple[Label, ...]  # counts, left of the plot
    ticks: tuple[Label, ...]  # times (UTC), below it
    grid: tuple[float, ...]  # the x of each time label's gridline
    hidden_to: float | None  # the window held older runs than were read: left..here
    hidden_label: Label | None  # says so inside that part, where it fits
    label: str
    runs: int  # runs of the window drawn


def _fmt(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _text_width(text: str, font: float) -> float:
    # A system sans-serif's digits, comma and letters are at most about 0.6 em wide.
    return len(text) * font * 0.6


Point = tuple[float, float, int]  # x, y, count


def _lines(stretches: Sequence[Sequence[Point]]) -> tuple[list[Line], list[Point]]:
    """Each unbroken stretch as paths of one kind each, and the lone points that no
    segment draws (a counted run between two that counted nothing)."""
    lines: list[Line] = []
    lone: list[Point] = []
    for stretch in stretches:
        if len(stretch) == 1:
            lone.append(stretch[0])
            continue
        kind = ""
        path: list[str] = []
        for (ax, ay, ac), (bx, by, bc) in pairwise(stretch):
            segment = "violated" if ac or bc else "ok"
            if segment != kind:
                if path:
                    lines.append(Line(" ".join(path), kind))
                path, kind = [f"M{_fmt(ax)},{_fmt(ay)}"], segment
            path.append(f"L{_fmt(bx)},{_fmt(by)}")
        lines.append(Line(" ".join(path), kind))
    return lines, lone


# Drawings kept, by their counts. `/` draws one sparkline per invariant each time it is built
# (every CACHE_SECONDS at most), and between two builds few invariants have run, so nearly
# all are drawn again from the same counts: at 1,000 invariants, drawing them was ~35 ms of
# each build's ~90 ms of CPU, time every other thread of the daemon waits for the GIL.
# A drawing is ~1.3 kB: 4,096 of them, ~5 MB, only with that many distinct count series.
SPARK_CACHE = 4096


def sparkline(counts: Sequence[int | None], runs: int | None = None) -> Sparkline | None:
    """Oldest first, a point per row of runs; `runs`: how many runs they stand for, when a
    held stretch (one point) stood for several. None when there is no run to draw."""
    return _sparkline(tuple(counts), len(counts) if runs is None else runs)


@lru_cache(maxsize=SPARK_CACHE)  # pure, and a Sparkline is immutable: safe to share
def _sparkline(counts: tuple[int | None, ...], runs: int) -> Sparkline | None:
    if not counts:
        return None
    known = [c for c in counts if c is not None]
    peak = max(known, default=0)
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    step = inner_w / max(1, len(counts) - 1)

    def x_of(i: int) -> float:
        return PAD + i * step if len(counts) > 1 else WIDTH / 2

    def y_of(count: int) -> float:
        return PAD + inner_h * (1 - (count / peak if peak else 0))

    stretches: list[list[Point]] = [[]]
    marks: list[Mark] = []
    for i, count in enumerate(counts):
        if count is None:
            stretches.append([])
            marks.append(Mark(x_of(i), HEIGHT - 1.5, "unknown"))
        else:
            stretches[-1].append((x_of(i), y_of(count), count))
    lines, lone = _lines([s for s in stretches if s])
    last = counts[-1]
    end = (x_of(len(counts) - 1), y_of(last), last) if last is not None else None
    for x, y, count in [p for p in lone if p != end] + ([end] if end else []):
        marks.append(Mark(x, y, "violated" if count else "ok"))
    scale: list[Label] = []
    if known:
        # Right of the line, beside the last run: the top of the line's range and its 0.
        x = WIDTH + 1
        if peak:
            scale.append(Label(x, PAD + 6, f"{peak:,}", "start"))
        scale.append(Label(x, HEIGHT - 1, "0", "start"))
    room = max((_text_width(s.text, SCALE_FONT) for s in scale), default=0)
    width = WIDTH + (ceil(room) + 3 if scale else 0)
    return Sparkline(
        width, HEIGHT, tuple(lines), tuple(marks), tuple(scale), _label(counts, known, runs), peak
    )


def _label(counts: Sequence[int | None], known: Sequence[int], stood_for: int) -> str:
    runs = counted(stood_for, "run")
    if stood_for != len(counts):
        runs += f" ({len(counts):,} points: runs that held one after another are one)"
    if not known:
        return f"Offending rows over the last {runs}: none counted."
    first, last = known[0], known[-1]
    gaps = len(counts) - len(known)
    unknown = f"; {counted(gaps, 'run')} counted nothing" if gaps else ""
    return (
        f"Offending rows over the last {runs}: {first:,} at first, {last:,} now, "
        f"at most {max(known):,}{unknown}."
    )


def downsample(
    runs: Sequence[tuple[datetime, int | None]], start: datetime, end: datetime, n: int
) -> list[Bucket]:
    """The window start..end cut into `n` equal slices of time, each with its runs (a run
    at `end` is in the last); runs outside the window are left out."""
    span = (end - start).total_seconds()
    tally = [0] * n
    peaks: list[int | None] = [None] * n
    errored = [False] * n
    for at, count in runs:
        if at < start or at > end:
            continue
        i = min(n - 1, int((at - start).total_seconds() / span * n))
        tally[i] += 1
        if count is None:
            errored[i] = True
        else:
            held = peaks[i]
            peaks[i] = count if held is None else max(held, count)
    return [Bucket(tally[i], peaks[i], errored[i]) for i in range(n)]


def span_words(span: timedelta) -> str:
    """`24 hours`, `7 days`: a window as the chart's label says it."""
    day = timedelta(days=1)
    if span >= 2 * day and span % day == timedelta(0):
        return counted(span // day, "day")
    return counted(ceil(span / timedelta(hours=1)), "hour")


def time_chart(
    runs: Sequence[tuple[datetime, int | None]],
    start: datetime,
    end: datetime,
    *,
    truncated: bool,
    width: int,
    height: int,
) -> TimeChart:
    """The runs (when each started, its count) of the window start..end, each placed by
    its time. `truncated`: the window held runs older than these that were not read; the
    part of the window before the oldest one is then shaded, not drawn as if empty."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    # Oldest first, whatever order they were read in: "at first" and "now" depend on it.
    inside = sorted(((at, c) for at, c in runs if start <= at <= end), key=lambda r: r[0])
    known = [c for _, c in inside if c is not None]
    peak = max(known, default=0)
    peak_text = f"{peak:,}"
    left = ceil(_text_width(peak_text, AXIS_FONT)) + 10.0
    right = width - 8.0
    top, bottom = 8.0, height - 26.0
    n = max(1, int((right - left) // BUCKET_PX))
    slice_w = (right - left) / n
    span = end - start

    def x_at(moment: datetime) -> float:
        return left + (moment - start) / span * (right - left)

    def y_of(count: int) -> float:
        return bottom - (bottom - top) * (count / peak if peak else 0)

    stretches: list[list[Point]] = [[]]
    marks: list[Mark] = []
    last: Point | None = None
    for i, bucket in enumerate(downsample(inside, start, end, n)):
        if not bucket.runs:
            continue  # no run in this slice of time: the line goes on to the next run
        x = left + (i + 0.5) * slice_w
        if bucket.errored:
            marks.append(Mark(x, bottom + 6, "unknown"))
        if bucket.peak is None:
            stretches.append([])
            continue
        last = (x, y_of(bucket.peak), bucket.peak)
        stretches[-1].append(last)
    lines, lone = _lines([s for s in stretches if s])
    for x, y, count in [p for p in lone if p != last] + ([last] if last else []):
        marks.append(Mark(x, y, "violated" if count else "ok"))

    scale = [Label(left - 6, bottom + 4, "0", "end")]
    if peak:
        scale.insert(0, Label(left - 6, top + 4, peak_text, "end"))
    ticks, grid = _ticks(start, end, left, right, width, height - 6, x_at)
    hidden_to = x_at(inside[0][0]) if truncated and inside else None
    hidden_label = None
    if hidden_to is not None and hidden_to - left > _text_width(HIDDEN, AXIS_FONT) + 8:
        hidden_label = Label((left + hidden_to) / 2, (top + bottom) / 2 + 4, HIDDEN, "middle")
    return TimeChart(
        width,
        height,
        left,
        top,
        right,
        bottom,
        tuple(lines),
        tuple(marks),
        tuple(scale),
        tuple(ticks),
        tuple(grid),
        hidden_to,
        hidden_label,
        _time_label(span, inside, known, truncated),
        len(inside),
    )


def _ticks(
    start: datetime,
    end: datetime,
    left: float,
    right: float,
    width: int,
    y: float,
    x_at: Callable[[datetime], float],
) -> tuple[list[Label], list[float]]:
    """Time labels at round times (hours, midnights, Mondays, UTC), as many as fit."""
    room = max(2, int((right - left) // TICK_ROOM))
    span = end - start
    step = next((s for s in TICK_STEPS if span / s <= room), TICK_STEPS[-1])
    moment = EPOCH + -((EPOCH - start) // step) * step  # the first round time in the window
    labels: list[Label] = []
    grid: list[float] = []
    while moment <= end:
        x = x_at(moment)
        midnight = (moment.hour, moment.minute) == (0, 0)
        text = f"{moment:%b} {moment.day}" if midnight else f"{moment:%H:%M}"
        half = _text_width(text, AXIS_FONT) / 2
        # A label near an edge moves inward to stay readable; its gridline stays true.
        labels.append(Label(min(max(x, half + 1), width - half - 1), y, text, "middle"))
        grid.append(x)
        moment += step
    return labels, grid


def _time_label(
    span: timedelta,
    inside: Sequence[tuple[datetime, int | None]],
    known: Sequence[int],
    truncated: bool,
) -> str:
    over = f"Offending rows over the last {span_words(span)}"
    if not inside:
        return f"{over}: no runs."
    runs = counted(len(inside), "run")
    older = "; older runs of this window are not shown" if truncated else ""
    if not known:
        return f"{over}: {runs}, none counted{older}."
    gaps = len(inside) - len(known)
    unknown = f"; {counted(gaps, 'run')} counted nothing" if gaps else ""
    return (
        f"{over}: {runs}, {known[0]:,} at first, {known[-1]:,} now, "
        f"at most {max(known):,}{unknown}{older}."
    )
