"""`invmon test --watch`: rerun the cases a change affects. The decisions are pure (what
changed, which invariants that touches); the loop polls file stamps, which works on every
filesystem and in every container, at a cost of one stat per file each interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from monitor.authoring.fixtures import SUFFIX
from monitor.invariants.loader import name_for

Stamps = dict[Path, tuple[int, int]]  # path -> (mtime_ns, size)


def stamps(folder: Path, extra: Iterable[Path] = ()) -> Stamps:
    found: Stamps = {}
    paths = [*folder.rglob("*.sql"), *folder.rglob(f"*{SUFFIX}"), *extra]
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            continue  # removed between listing and stat: the next look sees it gone
        found[path] = (info.st_mtime_ns, info.st_size)
    return found


def changed(
    before: Mapping[Path, tuple[int, int]], after: Mapping[Path, tuple[int, int]]
) -> set[Path]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def affected(paths: Iterable[Path], folder: Path, schema: Path | None) -> set[str] | None:
    """The invariant names whose file or cases changed; None when everything is (the
    schema changed)."""
    names = set()
    for path in paths:
        if schema is not None and path == schema:
            return None
        if path.name.endswith(SUFFIX):
            path = path.with_name(path.name.removesuffix(SUFFIX) + ".sql")
        try:
            names.add(name_for(path, folder))
        except ValueError:
            continue
    return names


def watch(
    folder: Path,
    schema: Path | None,
    run: Callable[[set[str] | None], None],
    interval: float = 0.5,
    should_stop: Callable[[], bool] = lambda: False,
) -> None:
    """Run everything once, then `run(names)` after each change, until `should_stop`."""
    extra = [schema] if schema is not None else []
    seen = stamps(folder, extra)
    run(None)
    while not should_stop():
        time.sleep(interval)  # the poll's period; nothing here waits on a result
        now = stamps(folder, extra)
        moved = changed(seen, now)
        if moved:
            seen = now
            run(affected(moved, folder, schema))
