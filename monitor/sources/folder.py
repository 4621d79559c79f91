"""A local folder as a source: every regular file under it, recursively, keyed by its path
relative to the folder (`/`-separated). Links are not followed: a listing stays inside.

Entries are read one at a time (`os.scandir`), each counted against max_objects and the
deadline as it is read: a directory of millions of names is never held as one list. A
file or folder that disappears while it is listed is left out, as a bucket listing taken
a moment later would leave it out; any other error reading it is the listing's error.
"""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime

from monitor.sources.listing import Bounds, Listing, ListingError, checked_key


def list_folder(folder: str, bounds: Bounds) -> Listing:
    listing: Listing = bounds.listing(pages=1)
    root = os.path.abspath(folder)
    if not os.path.isdir(root):
        raise ListingError(f"source {bounds.name}: folder {folder} does not exist")
    waiting = [root]
    while waiting:
        current = waiting.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    bounds.remaining()
                    found = _entry(entry, root, bounds.name)
                    if isinstance(found, str):
                        waiting.append(found)
                    elif found is not None:
                        bounds.admit(listing, *found)
        except FileNotFoundError:
            if current == root:  # the whole source gone is not an empty listing
                gone = f"source {bounds.name}: folder {folder} does not exist"
                raise ListingError(gone) from None
        except OSError as exc:
            raise ListingError(
                f"source {bounds.name}: cannot read {exc.filename or current} ({exc.strerror})"
            ) from None
    return listing


Found = tuple[str, int, datetime, None]  # key, size, last modified, etag


def _entry(entry: os.DirEntry[str], root: str, name: str) -> Found | str | None:
    """A regular file's key, size and time, a folder's path to list next, or None (a link,
    a device, or gone since its folder was read)."""
    try:
        mode = entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(mode.st_mode):
        return entry.path
    if not stat.S_ISREG(mode.st_mode):
        return None
    key = checked_key(name, os.path.relpath(entry.path, root).replace(os.sep, "/"))
    return key, mode.st_size, datetime.fromtimestamp(mode.st_mtime, UTC), None
