"""rows.exact_json: a json value's structure only where Python shows exactly what its text
holds, else the text. Pure."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from monitor.execution.rows import exact_json

SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)
# Spellings a text may hold that json.dumps never writes: an exponent, trailing zeros,
# digits past a double's, a key twice, a word that is not JSON.
SPELLINGS = st.sampled_from(
    ["1e400", "1.10", "1e5", "0.1000000000000000055511151231257827", "-0.0", "-0", "NaN"]
)


@given(VALUES)
def test_what_it_returns_shows_exactly_the_text_it_was_given(value: object) -> None:
    text = json.dumps(value, ensure_ascii=False)
    shown = exact_json(text)
    assert shown == text or json.dumps(shown, ensure_ascii=False) == text


@given(VALUES, SPELLINGS)
def test_a_number_python_would_show_otherwise_keeps_the_whole_text(
    value: object, spelling: str
) -> None:
    text = json.dumps([value, "§"], ensure_ascii=False).replace('"§"', spelling)
    shown = exact_json(text)
    assert shown == text or json.dumps(shown, ensure_ascii=False) == text


def test_equal_keys_and_deep_nesting_keep_the_text() -> None:
    assert exact_json('{"a":1,"a":2}') == '{"a":1,"a":2}'
    deep = "[" * 100_000 + "]" * 100_000
    assert exact_json(deep) == deep
    assert exact_json('{"k": [1, null, "x"]}') == {"k": [1, None, "x"]}


def test_a_json_null_is_never_read_as_sql_null() -> None:
    """A review found jsonb 'null' and SQL NULL both reported as null, and keyed alike."""
    assert exact_json("null") == "null"
    assert exact_json(" null ") == "null"
    assert exact_json('{"k": null}') == {"k": None}  # inside a value, null is unambiguous
