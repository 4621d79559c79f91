"""text.shown_value: one line per value that no other value of its column shows as, with
nothing hidden or reversed. A truth review found NULL and the string '∅' alike, '' and ' '
and 'a  b' collapsed, and a right-to-left override reversing what followed it. Pure."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from monitor.text import NULL_MARK, cut_value_text, shown_value


def test_the_values_a_review_found_alike_are_told_apart() -> None:
    assert [shown_value(v) for v in (None, NULL_MARK, "", " ", "a  b", "a\nb")] == [
        "∅",
        '"∅"',
        '""',
        '" "',
        '"a  b"',
        '"a\\nb"',
    ]
    assert shown_value("ref \u202e 10.05") == '"ref \\u202e 10.05"'
    assert shown_value("plain text, as it is") == "plain text, as it is"
    assert shown_value({"k": "\u200b"}) == '{"k": "\\u200b"}'


@given(st.text(max_size=12), st.text(max_size=12))
def test_two_strings_never_show_alike(a: str, b: str) -> None:
    if a != b:
        assert shown_value(a) != shown_value(b)


@given(st.none() | st.text(max_size=20) | st.integers() | st.lists(st.text(max_size=5)))
def test_nothing_hidden_and_one_line(value: object) -> None:
    shown = shown_value(value)
    hidden = [ch for ch in shown if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")]
    assert hidden == []  # newlines included (Cc): one line


def test_a_cut_value_keeps_its_label_when_a_table_cuts_it_shorter() -> None:
    """The status page cut '… [cut: 9,000 bytes in all, md5 …]' off a long value, which then
    read as the whole of it."""
    label = "… [cut: 9,000 bytes in all, md5 0123456789abcdef0123456789abcdef]"
    shown = cut_value_text("x" * 300 + label, 200)
    assert len(shown) == 200 and shown.endswith(label) and shown.startswith("x" * 100)
    assert cut_value_text("y" * 300, 200) == "y" * 199 + "…"
    assert cut_value_text("short" + label, 200) == "short" + label
