"""Mutes, the pure rule and the table: what a mute covers, when it is active, which requests
are refused, and that releasing an ended mute is claimed once whoever asks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.store.mute_table import MuteTable
from monitor.store.mutes import Mute, MuteRefused, checked, muting, name_covered
from monitor.store.state import StateStore

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def mute(selector: str | None, target: str | None = None, **times: datetime) -> Mute:
    return Mute(
        1,
        selector,
        target,
        times.get("starts", T0),
        times.get("ends", T0 + HOUR),
        "failover",
        "ops (command line)",
        T0,
        times.get("early"),
    )


@pytest.mark.parametrize(
    ("selector", "covered", "not_covered"),
    [
        ("orders/paid_twice", {"orders/paid_twice"}, {"orders/paid_twice_2", "paid_twice"}),
        ("orders/", {"orders/a", "orders/deep/b"}, {"orders", "ordersx/a", "billing/orders/a"}),
        ("orders/*_twice", {"orders/paid_twice", "orders/x/y_twice"}, {"orders/twice"}),
    ],
)
def test_a_selector_covers_names_as_select_does(
    selector: str, covered: set[str], not_covered: set[str]
) -> None:
    assert {n for n in covered | not_covered if name_covered(selector, n)} == covered


@given(st.from_regex(r"[a-z]{1,6}(/[a-z]{1,6}){0,2}", fullmatch=True), st.text(max_size=12))
def test_a_folder_selector_covers_exactly_the_names_under_it(folder: str, rest: str) -> None:
    assert name_covered(folder + "/", folder + "/" + rest) is True
    assert name_covered(folder + "/", folder + rest.replace("/", "")) is False


def test_a_mute_is_scheduled_then_active_then_ended_and_unmute_ends_it_early() -> None:
    m = mute("orders/", starts=T0 + HOUR, ends=T0 + 3 * HOUR)
    assert [m.state(T0), m.state(T0 + HOUR), m.state(T0 + 3 * HOUR)] == [
        "scheduled",
        "active",
        "ended",
    ]
    early = mute("orders/", ends=T0 + 3 * HOUR, early=T0 + HOUR)
    assert (early.ends, early.state(T0 + HOUR)) == (T0 + HOUR, "ended")


def test_a_target_mute_covers_its_target_only_and_the_longest_active_one_wins() -> None:
    shop = mute(None, "shop")
    assert (shop.covers("anything", "shop"), shop.covers("anything", "jobs")) == (True, False)
    short, long = mute("a"), Mute(2, None, "shop", T0, T0 + 5 * HOUR, "r", "u", T0)
    assert muting([short, long], "a", "shop", T0) == long
    assert muting([short, long], "a", "jobs", T0) == short
    assert muting([short, long], "b", "jobs", T0) is None
    assert muting([short], "a", "shop", T0 + HOUR) is None  # over at its end


@pytest.mark.parametrize(
    ("selector", "target", "ends", "reason", "everything", "refusal"),
    [
        (None, None, T0 + HOUR, "r", False, "pass --all to mean it"),
        ("*", None, T0 + HOUR, "r", False, "pass --all to mean it"),
        ("a", None, T0 + HOUR, "  ", False, "say why with --reason"),
        ("a", None, T0 + HOUR, "x\x1b[2J", False, "--reason must be printable"),
        ("a", None, T0 - HOUR, "r", False, "ends before it starts"),
        ("a", None, T0 + timedelta(days=91), "r", False, "at most 90 days"),
        ("tag:money", None, T0 + HOUR, "r", False, "tags are not stored"),
        ("a" * 201, None, T0 + HOUR, "r", False, "at most 200 characters"),
    ],
)
def test_requests_that_cannot_be_meant_are_refused_saying_which_flag(
    selector: str | None,
    target: str | None,
    ends: datetime,
    reason: str,
    everything: bool,
    refusal: str,
) -> None:
    with pytest.raises(MuteRefused) as refused:
        checked(selector, target, T0, ends, reason, everything, T0)
    assert refusal in str(refused.value)


def test_everything_is_muted_only_with_all() -> None:
    assert checked(None, None, T0, T0 + HOUR, " planned ", True, T0) == (None, "planned")
    assert checked("*", "shop", T0, T0 + HOUR, "r", False, T0) == (None, "r")


def test_the_table_keeps_mutes_lists_them_and_releases_an_ended_one_once(
    store: StateStore,
) -> None:
    table = MuteTable(store.storage)
    one = table.add("orders/", None, T0, T0 + HOUR, "failover", "ops", T0)
    two = table.add(None, "shop", T0 + HOUR, T0 + 2 * HOUR, "upgrade", "ops", T0)
    assert [m.id for m in table.listed(T0)] == [two.id, one.id]
    with store.storage.transaction() as tx:
        assert [m.id for m in table.current(tx, T0)] == [one.id]
        table.hold(tx, one.id, 7)
        table.hold(tx, one.id, 7)  # held once however often
        table.hold(tx, one.id, 3)
        assert table.ended_unreleased(tx, T0) == []
    ended = table.end(one.id, T0 + timedelta(minutes=10))
    assert ended is not None and ended.ends == T0 + timedelta(minutes=10)
    later = T0 + timedelta(minutes=11)
    with store.storage.transaction() as tx:
        assert [m.id for m in table.ended_unreleased(tx, later)] == [one.id]
        assert table.release(tx, one.id, later) == [3, 7]
        assert table.release(tx, one.id, later) is None
    assert [m.id for m in table.listed(later)] == [two.id]
    assert [m.id for m in table.listed(later, include_ended=True)] == [two.id, one.id]
    assert table.end(99, later) is None
