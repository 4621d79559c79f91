"""An invariant's SQL cut into spans to colour, by PostgreSQL's own scanner. Pure.

pglast (already the fence's parser) exposes libpg_query's scanner, so keywords, strings,
numbers and comments are found exactly as the server finds them: a quote or a dollar sign
inside a string never confuses the colouring. The spans cover the text exactly; escaping
is left to the template, as for every other value.
"""

from __future__ import annotations

from dataclasses import dataclass

from pglast.parser import scan

MAX_HIGHLIGHT = 256 * 1024  # an invariant file's own limit; past it, plain text


@dataclass(frozen=True)
class Span:
    text: str
    kind: str | None  # "kw", "str", "num", "com", "param", or None for plain text


def _kind(name: str, keyword: str) -> str | None:
    if keyword != "NO_KEYWORD":
        return "kw"
    if name in ("SCONST", "USCONST", "BCONST", "XCONST"):
        return "str"
    if name in ("ICONST", "FCONST"):
        return "num"
    if name in ("SQL_COMMENT", "C_COMMENT"):
        return "com"
    if name == "PARAM":
        return "param"
    return None


def highlight(sql: str) -> list[Span]:
    """`sql` as spans whose texts, joined, are `sql` again."""
    if len(sql) > MAX_HIGHLIGHT:
        return [Span(sql, None)]
    try:
        tokens = scan(sql)
    except Exception:  # a scanner error: the text is still worth showing, uncoloured
        return [Span(sql, None)]
    # Token offsets are character offsets into `sql` (pglast maps libpg_query's bytes back);
    # `end` is inclusive.
    spans: list[Span] = []
    at = 0
    for token in tokens:
        kind = _kind(token.name, token.kind)
        if kind is None:
            continue
        if token.start > at:
            spans.append(Span(sql[at : token.start], None))
        spans.append(Span(sql[token.start : token.end + 1], kind))
        at = token.end + 1
    if at < len(sql):
        spans.append(Span(sql[at:], None))
    return spans
