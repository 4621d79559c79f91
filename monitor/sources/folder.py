"""A local folder as a source: every regular file under it, recursively, keyed by its path
relative to the folder (`/`-separated). Links are not followed: a listing stays inside.

Entries are read one at a time (`os.scandir`), each counted against max_objects and the
deadline as it is read: a directory of millions of names is never held as one list. A
file or folder that disappears while it is listed is left out, as a bucket listing taken
a moment later would leave it out; any other error reading it is the listing's error.
"""

from __future__ import annotations

import errno
import os
import stat
from datetime import UTC, datetime

from monitor.sources.listing import Bounds, Listing, ListingError, checked_key

# Each folder below the root is opened through its parent's descriptor, without following
# a link: a folder swapped for a link while the listing runs (`mv t old && ln -s /etc t`)
# is refused by the kernel, where a path opened by name would have been followed outside.
_SUBFOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def list_folder(folder: str, bounds: Bounds) -> Listing:
    listing: Listing = bounds.listing(pages=1)
    root = os.path.abspath(folder)
    try:
        # The root itself is the operator's choice, a link to it included.
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):
        raise ListingError(f"source {bounds.name}: folder {folder} does not exist") from None
    except OSError as exc:
        raise ListingError(f"source {bounds.name}: cannot read {root} ({exc.strerror})") from None
    # Depth first, one open descriptor per level: (descriptor, its path from the root,
    # the subfolders of it still to list).
    stack: list[tuple[int, str, list[str]]] = []
    try:
        stack.append((root_fd, "", _read(root_fd, "", root, listing, bounds)))
        while stack:
            fd, rel, subfolders = stack[-1]
            if not subfolders:
                os.close(fd)
                stack.pop()
                continue
            name = subfolders.pop()
            try:
                child = os.open(name, _SUBFOLDER, dir_fd=fd)
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone since its folder was read, or no longer a folder
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    continue  # a link now: not followed
                raise ListingError(
                    f"source {bounds.name}: cannot read {os.path.join(root, rel, name)} "
                    f"({exc.strerror})"
                ) from None
            path = f"{rel}{name}/"
            stack.append((child, path, _read(child, path, root, listing, bounds)))
    finally:
        for fd, _, _ in stack:
            os.close(fd)
    return listing


def _read(fd: int, rel: str, root: str, listing: Listing, bounds: Bounds) -> list[str]:
    """Admit the regular files of the folder open on `fd` (`rel` from the root) and return
    its subfolders' names, to list next."""
    subfolders: list[str] = []
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                bounds.remaining()
                try:
                    mode = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone since its folder was read
                if stat.S_ISDIR(mode.st_mode):
                    subfolders.append(entry.name)
                elif stat.S_ISREG(mode.st_mode):  # a link, a device, a socket: left out
                    key = checked_key(bounds.name, rel + entry.name)
                    modified = datetime.fromtimestamp(mode.st_mtime, UTC)
                    bounds.admit(listing, key, mode.st_size, modified, None)
    except OSError as exc:
        raise ListingError(
            f"source {bounds.name}: cannot read {os.path.join(root, rel)} ({exc.strerror})"
        ) from None
    return subfolders
