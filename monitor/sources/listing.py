"""What every lister shares: the bounds on a listing, the grace window, and the one entry
point the runner calls. The listers themselves are folder.py and boto3_s3.py.

A listing is hostile input until bounded: it stops with an error past `max_objects` (never a
silent cut, which would report every object beyond it as missing), past its own timeout,
and at a key longer than S3 allows or that is not text.
"""

from __future__ import annotations

import os
import queue
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from monitor.sources.binding import Bound, ObjectRow, Objects, bind
from monitor.sources.header import SourceSpec
from monitor.text import shorten

MAX_KEY_BYTES = 1024  # S3's own limit on a key; a longer name is not an object key
_SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")


# user:password@ in any URL a message quotes (an endpoint may come from AWS_ENDPOINT_URL_S3,
# which no header check saw): everything up to the host's last `@`, whatever it holds.
_URL_USERINFO = re.compile(r"(?<=://)[^/\s]*@")
_ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def scrubbed(message: str) -> str:
    """Defence in depth: no credential of the environment's survives in a message, whatever
    library wrote it, as written or as a library quoted it (`\\'`, percent-encoded)."""
    secrets = [os.environ.get(variable) or "" for variable in _SECRET_VARIABLES]
    for variable in _ENDPOINT_VARIABLES:
        # A password with a space or a quote breaks the URL pattern below: its own text goes.
        endpoint = urllib.parse.urlsplit(os.environ.get(variable) or "")
        secrets += [endpoint.password or "", endpoint.username or ""]
    for value in secrets:
        if len(value) >= 4:
            for form in {value, value.replace("'", "\\'"), urllib.parse.quote(value, safe="")}:
                message = message.replace(form, "***")
    return _URL_USERINFO.sub("***@", message)


class ListingError(Exception):
    """The source could not be listed completely; the run is `error`, never `ok`."""


@dataclass
class Listing:
    """The objects kept (older than `min_age`), packed as they were listed (binding.py),
    and what the listing took."""

    rows: Objects
    seen: int = 0  # every object listed, the new ones included
    ignored_new: int = 0  # newer than min_age
    pages: int = 0
    seconds: float = 0.0


class Bounds:
    """Counts what a lister reads against the source's limits, as it reads it."""

    def __init__(
        self,
        name: str,
        spec: SourceSpec,
        clock: Callable[[], float],
        listed_at: datetime | None = None,
    ) -> None:
        self.name = name
        self.spec = spec
        self._clock = clock
        self._deadline = clock() + spec.timeout_delta.total_seconds()
        self._abandoned = threading.Event()
        # The grace window is applied as each object arrives (see `settled`): objects last
        # modified after this are new, counted and left out.
        listed_at = listed_at or datetime.now(UTC)
        min_age = spec.min_age_delta
        self._cutoff = listed_at - min_age if min_age > timedelta(0) else None

    def listing(self, pages: int = 0) -> Listing:
        """An empty listing holding the columns the source asked for."""
        return Listing(Objects(self.spec.columns), pages=pages)

    def remaining(self) -> float:
        """Seconds left before the listing's timeout; raises once it has passed (or once
        the run stopped waiting for this listing)."""
        left = self._deadline - self._clock()
        if left <= 0 or self._abandoned.is_set():
            raise self.overdue()
        return left

    def overdue(self) -> ListingError:
        return ListingError(
            f"source {self.name}: listing {self.spec.where} took longer than its timeout "
            f"({self.spec.timeout_said})"
        )

    def abandon(self) -> None:
        """The run has stopped waiting: the lister stops at its next check."""
        self._abandoned.set()

    def admit(
        self,
        listing: Listing,
        key: str,
        size: int | None,
        last_modified: datetime | None,
        etag: str | None,
    ) -> None:
        """Count one listed object against the bounds, then keep it unless it is new."""
        listing.seen += 1
        if listing.seen > self.spec.max_objects:
            raise ListingError(
                f"source {self.name}: {self.spec.where} holds more than "
                f"{self.spec.max_objects:,} objects (max_objects); the invariant is not "
                "evaluated on a partial listing"
            )
        if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
            raise ListingError(
                f"source {self.name}: an object key longer than {MAX_KEY_BYTES:,} bytes: "
                f"{shorten(key, 80)}"
            )
        if is_new(last_modified, self._cutoff):
            listing.ignored_new += 1
            return
        listing.rows.add(key, size, last_modified, etag)


def checked_key(name: str, key: str) -> str:
    """A key the database can take as text (a file name may not be UTF-8)."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        shown = shorten(
            key.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"), 80
        )
        raise ListingError(f"source {name}: an object key that is not UTF-8: {shown}") from None
    if "\x00" in key:
        raise ListingError(f"source {name}: an object key holding a NUL byte: {shorten(key, 80)}")
    return key


def is_new(last_modified: datetime | None, cutoff: datetime | None) -> bool:
    """Whether an object is too new to be judged: modified after the grace window's cutoff
    (None: no grace window). An object with no time is judged: nothing says it is new; one
    with no zone is taken as UTC, as S3 and the folder lister give times."""
    if cutoff is None or last_modified is None:
        return False
    if last_modified.tzinfo is None:
        last_modified = last_modified.replace(tzinfo=UTC)
    return last_modified > cutoff


def settled(
    rows: Iterable[ObjectRow], min_age: timedelta, listed_at: datetime
) -> tuple[list[ObjectRow], int]:
    """The rows old enough to be judged, and how many were newer: for rows given whole (a
    fixture's), the rule `Bounds.admit` applies to each listed object as it arrives."""
    cutoff = listed_at - min_age if min_age > timedelta(0) else None
    given = list(rows)
    kept = [row for row in given if not is_new(row.last_modified, cutoff)]
    return kept, len(given) - len(kept)


Lister = Callable[[str, SourceSpec], Listing]


def list_source(
    name: str, spec: SourceSpec, clock: Callable[[], float] = time.monotonic
) -> Listing:
    """List one source with the lister its kind needs, bounded, grace applied.

    The lister runs on a thread of its own and the run waits for it at most `timeout`:
    a store that stalls inside one request (a socket read that trickles, a hung NFS stat)
    cannot hold the run past its bound, which the lister's own checks between pages and
    files could not promise. An abandoned lister stops at its next check; its request
    ends with the client's own socket timeouts."""
    started = clock()
    bounds = Bounds(name, spec, clock, datetime.now(UTC))
    answer: queue.Queue[Listing | ListingError] = queue.Queue(maxsize=1)

    def work() -> None:
        try:
            answer.put(_listed(name, spec, bounds))
        except ListingError as exc:
            answer.put(exc)

    threading.Thread(target=work, name=f"invmon-list-{name}", daemon=True).start()
    try:
        outcome = answer.get(timeout=spec.timeout_delta.total_seconds())
    except queue.Empty:
        bounds.abandon()
        raise bounds.overdue() from None
    if isinstance(outcome, ListingError):
        raise outcome
    outcome.seconds = clock() - started
    return outcome


def _listed(name: str, spec: SourceSpec, bounds: Bounds) -> Listing:
    try:
        if spec.folder is not None:
            from monitor.sources.folder import list_folder

            listing = list_folder(spec.folder, bounds)
        else:
            # boto3 costs a few hundred milliseconds to import: only when a source needs it.
            from monitor.sources.boto3_s3 import list_s3

            listing = list_s3(spec, bounds)
    except ListingError:
        raise
    except Exception as exc:
        # Whatever a lister did not foresee is this run's error, never a crash of the pass.
        raise ListingError(
            scrubbed(
                f"source {name}: listing {spec.where} failed: {type(exc).__name__}: "
                f"{shorten(str(exc), 200)}"
            )
        ) from None
    return listing


def listed_and_bound(
    sources: Mapping[str, SourceSpec], lister: Lister = list_source
) -> tuple[Bound, dict[str, Listing]]:
    """Every source of an invariant listed (in header order; the first error stops), and
    the CTEs and parameters that bind them: what `check`, the daemon and `explain` send."""
    listings = {name: lister(name, spec) for name, spec in sources.items()}
    return bind(sources, {name: listing.rows for name, listing in listings.items()}), listings
