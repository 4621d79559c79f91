"""Pure scheduling decisions, in milliseconds: slots from the schedule alone, cron's days of
the week, jitter, and the timetable's due slots. Each table of cases is run by one
parametrized test."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from monitor.config import ConfigError
from monitor.config.loading import parse_config
from monitor.daemon.slots import Timetable, latest_slot, next_slot, spread
from monitor.durations import parse_schedule

T0 = datetime(2026, 11, 30, 12, 7, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("schedule", "latest", "following"),
    [
        (
            "every 15m",
            datetime(2026, 11, 30, 12, 0, tzinfo=UTC),
            datetime(2026, 11, 30, 12, 15, tzinfo=UTC),
        ),
        ("every 1s", T0, T0 + timedelta(seconds=1)),
        (
            "*/10 * * * *",
            datetime(2026, 11, 30, 12, 0, tzinfo=UTC),
            datetime(2026, 11, 30, 12, 10, tzinfo=UTC),
        ),
        (
            "0 9 * * 1",
            datetime(2026, 11, 30, 9, 0, tzinfo=UTC),
            datetime(2026, 12, 7, 9, 0, tzinfo=UTC),
        ),
        ("0 0 1 1 *", datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
    ],
)
def test_slots_are_nominal_times_from_the_schedule_alone(
    schedule: str, latest: datetime, following: datetime
) -> None:
    parsed = parse_schedule(schedule)
    assert latest_slot(parsed, T0) == latest
    assert next_slot(parsed, T0) == following
    assert next_slot(parsed, latest) == following


@pytest.mark.parametrize(
    ("field", "days"),
    [
        ("1", "mon"),
        ("0", "sun"),
        ("7", "sun"),
        ("1-5", "mon,tue,wed,thu,fri"),
        ("*/2", "sun,tue,thu,sat"),
        ("sat,sun", "sun,sat"),
        ("5-7", "sun,fri,sat"),
        ("1/3", "mon,thu"),
    ],
)
def test_cron_days_of_week_are_read_as_cron_reads_them(field: str, days: str) -> None:
    from monitor.durations import _days_of_week

    assert _days_of_week(field) == days


def test_jitter_is_stable_per_slot_and_below_a_tenth_of_the_period() -> None:
    every = parse_schedule("every 10s")
    offsets = {spread(f"inv{i}", T0, every, timedelta(minutes=5)) for i in range(200)}
    assert max(offsets) < timedelta(seconds=1)
    assert len(offsets) > 150  # spread out, not all at once
    assert spread("a", T0, every, timedelta(seconds=10)) == spread(
        "a", T0, every, timedelta(seconds=10)
    )
    assert spread("a", T0, every, timedelta(0)) == timedelta(0)


def test_a_new_invariant_is_due_at_once_then_at_its_next_slot_never_twice_at_once() -> None:
    table = Timetable(max_jitter=timedelta(0))
    every = parse_schedule("every 1m")
    table.sync({"a": every}, T0)
    assert [(d.name, d.slot) for d in table.due(T0)] == [
        ("a", datetime(2026, 11, 30, 12, 7, tzinfo=UTC))
    ]
    assert table.due(T0 + timedelta(seconds=20)) == []
    at_next = datetime(2026, 11, 30, 12, 8, tzinfo=UTC)
    assert table.due(at_next, busy={"a"}) == []  # still running: no overlap
    # Ten minutes late, it runs once, for the latest slot (missed slots are coalesced).
    late = at_next + timedelta(minutes=10, seconds=5)
    assert [d.slot for d in table.due(late)] == [datetime(2026, 11, 30, 12, 18, tzinfo=UTC)]
    assert table.next_run("a") == datetime(2026, 11, 30, 12, 19, tzinfo=UTC)


def test_a_changed_schedule_waits_for_its_next_slot_and_a_removed_invariant_is_dropped() -> None:
    table = Timetable(max_jitter=timedelta(0))
    table.sync({"a": parse_schedule("every 1m")}, T0)
    table.due(T0)
    table.sync({"a": parse_schedule("every 5m")}, T0)
    assert table.next_run("a") == datetime(2026, 11, 30, 12, 10, tzinfo=UTC)
    table.sync({}, T0)
    assert "a" not in table and table.due(T0 + timedelta(hours=1)) == []


def test_jitter_0s_turns_it_off_and_a_negative_one_is_refused_naming_the_key() -> None:
    config = parse_config({"daemon": {"jitter": "0s"}}, "invmon.yaml")
    assert config.daemon.jitter == timedelta(0)
    every = parse_schedule("every 1m")
    assert {spread(f"inv{i}", T0, every, config.daemon.jitter) for i in range(50)} == {timedelta(0)}
    with pytest.raises(ConfigError) as refused:
        parse_config({"daemon": {"jitter": -5}}, "invmon.yaml")
    assert str(refused.value) == (
        "invmon.yaml: field 'daemon.jitter': a duration must be 0 (off) or more and under "
        "100 years, got -5"
    )


def test_the_timetable_says_when_its_next_start_is_and_a_running_one_is_tried_apart() -> None:
    """The daemon ticks when the next start comes (jobs.py), so the timetable says when
    that is; an invariant due while its run is in flight is not a start to wait for: it is
    tried at every turn until its run ends, then runs its latest slot."""
    table = Timetable(max_jitter=timedelta(0))
    assert table.next_start() is None
    table.sync({"a": parse_schedule("every 1m"), "b": parse_schedule("every 5m")}, T0)
    assert table.next_start() == T0  # new: due at once
    assert [d.name for d in table.due(T0)] == ["a", "b"]
    minute = datetime(2026, 11, 30, 12, 8, tzinfo=UTC)
    assert table.next_start() == minute
    assert table.due(minute, busy={"a"}) == []
    assert table.next_start() == datetime(2026, 11, 30, 12, 10, tzinfo=UTC)  # b's
    assert [(d.name, d.slot) for d in table.due(minute + timedelta(seconds=3))] == [("a", minute)]
    assert table.next_start() == minute + timedelta(minutes=1)
    # A schedule changed many times leaves stale items behind; none of them is due.
    five = parse_schedule("every 5m")
    for n in range(200):
        table.sync({"a": parse_schedule(f"every {n % 7 + 1}m"), "b": five}, T0)
    late = T0 + timedelta(hours=1)
    assert sorted(d.name for d in table.due(late)) == ["a", "b"]
    assert table.due(late) == []
