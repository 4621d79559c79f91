"""A local folder as a source: every regular file under it, recursively, keyed by its path
relative to the folder (`/`-separated). Links are not followed: a listing stays inside."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from monitor.sources.binding import ObjectRow
from monitor.sources.listing import Bounds, Listing, ListingError, checked_key


def list_folder(folder: str, bounds: Bounds) -> Listing:
    listing = Listing(pages=1)
    root = os.path.abspath(folder)
    if not os.path.isdir(root):
        raise ListingError(f"source {bounds.name}: folder {folder} does not exist")

    def unreadable(error: OSError) -> None:
        raise ListingError(f"source {bounds.name}: cannot read {error.filename} ({error.strerror})")

    for current, folders, files in os.walk(root, onerror=unreadable):
        folders.sort()
        bounds.remaining()
        for file_name in sorted(files):
            path = os.path.join(current, file_name)
            try:
                stat = os.lstat(path)
            except OSError as exc:
                raise ListingError(
                    f"source {bounds.name}: cannot read {path} ({exc.strerror})"
                ) from None
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            key = checked_key(bounds.name, os.path.relpath(path, root).replace(os.sep, "/"))
            row = ObjectRow(key, stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC), None)
            bounds.admit(listing, row)
            listing.rows.append(row)
    return listing
