"""text.shown_value, and the command line's tables of rows: one line per value that no
other value of its column shows as, with nothing hidden or reversed. A truth review found
NULL and the string '∅' alike, '' and ' ' and 'a  b' collapsed, and a right-to-left override
reversing what followed it. Pure."""

from __future__ import annotations

import unicodedata

from hypothesis import example, given
from hypothesis import strategies as st

from monitor.cli.render import _cell, results_table
from monitor.execution.results import RunResult
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


def test_the_command_line_s_table_shows_a_row_s_values_as_the_database_held_them() -> None:
    """The table of `invmon check` and of a pytest failure cut timestamps to the second
    (10:00:00.75 and 10:00:00.999 alike), rewrote a text that looks like a timestamp into
    one, and cut every value at 28 characters, so two that differ past them showed alike."""
    long_a, long_b = "x" * 60 + "1", "x" * 60 + "2"
    rows: list[dict[str, object]] = [
        {"at": "2026-01-01T10:00:00.750000+00:00", "note": "2026-01-01T10:00:00.123456+00:00"},
        {"at": "2026-01-01T10:00:00.999000+00:00", "note": long_a},
        {"at": None, "note": long_b},
    ]
    result = RunResult.counted("races", 3, ["at", "note"], rows)
    lines = results_table([result]).splitlines()
    table = lines[lines.index("races: 3 offending rows") + 1 :][:5]
    cells = [line.split() for line in table[2:]]
    assert [c[0] for c in cells] == [
        "2026-01-01T10:00:00.750000+00:00",
        "2026-01-01T10:00:00.999000+00:00",
        "∅",
    ]
    assert cells[0][1] == "2026-01-01T10:00:00.123456+00:00"
    assert len({c[1] for c in cells}) == 3
    assert all(len(c[1]) <= 40 for c in cells)


@given(st.text(min_size=41, max_size=80), st.text(min_size=41, max_size=80))
@example("x" * 60 + "1", "x" * 60 + "2")  # alike past any cut: random texts rarely are
def test_two_values_cut_in_a_table_never_show_alike(a: str, b: str) -> None:
    if a != b:
        assert _cell(a, of_a_row=True) != _cell(b, of_a_row=True)
