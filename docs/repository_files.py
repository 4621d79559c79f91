"""An mkdocs hook: the manual's links to the repository's own files, made to work on the site.

The pages link to files beside the manual as they are in the repository (`../deploy/x.sql`),
so the links work where people read the Markdown (a clone, GitHub). mkdocs knows only the
files under docs/, so such a link would be "not found". This hook copies each file a page
links to into the site under `repo/` (a Markdown file becomes a page there, e.g. bench's
figures) and points the link at the copy. A link to a file that does not exist is left as
written, so `mkdocs build --strict` fails on it as on any broken link.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page

REPOSITORY = Path(__file__).resolve().parents[1]
DOCS = REPOSITORY / "docs"
COPIES = "repo"  # the site folder the copies go to
# A Markdown link or image whose target leaves docs/: `](../path)` or `](../path#part)`.
LINK = re.compile(r"\]\((?P<target>\.\./[^)#\s]+)(?P<part>#[^)\s]*)?\)")


def _outside(page_uri: str, target: str) -> str | None:
    """The repository-relative path a page's link names, when it is a file outside docs/."""
    path = (DOCS / posixpath.dirname(page_uri) / target).resolve()
    if not path.is_file() or DOCS in path.parents or REPOSITORY not in path.parents:
        return None
    return path.relative_to(REPOSITORY).as_posix()


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    wanted: set[str] = set()
    for file in list(files.documentation_pages()):
        text = Path(file.abs_src_path or "").read_text(encoding="utf-8")
        for match in LINK.finditer(text):
            outside = _outside(file.src_uri, match["target"])
            if outside is not None:
                wanted.add(outside)
    for outside in sorted(wanted):
        source = str(REPOSITORY / outside)
        # Not in the nav, but always built: mkdocs leaves out a path with a dot-folder
        # (`.ci/run`) by default, and the page would link to nothing.
        copy = File.generated(
            config,
            f"{COPIES}/{outside}",
            abs_src_path=source,
            inclusion=InclusionLevel.NOT_IN_NAV,
        )
        files.append(copy)
    return files


def on_page_markdown(markdown: str, page: Page, **_: Any) -> str:
    here = posixpath.dirname(page.file.src_uri)

    def relink(match: re.Match[str]) -> str:
        outside = _outside(page.file.src_uri, match["target"])
        if outside is None:
            return match[0]  # a page of the manual, or broken: mkdocs judges it
        copy = posixpath.relpath(f"{COPIES}/{outside}", here or ".")
        return f"]({copy}{match['part'] or ''})"

    if page.file.src_uri.startswith(COPIES + "/"):
        return markdown  # a copied file's own links are the repository's business
    return LINK.sub(relink, markdown)
