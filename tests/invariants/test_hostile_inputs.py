"""Every input is hostile until bounded: invariant files, headers, fixtures and the config
come from pull requests and operators. Each nasty one below is refused with a sentence at its
place (never a traceback), within a size and memory bound, and never stops the rest."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest
import yaml
from helpers import cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor import yamlsafe
from monitor.authoring.fixtures import load_fixture
from monitor.config import ConfigError, load_config, parse_config
from monitor.invariants.header import HeaderError, parse_header, split_file
from monitor.invariants.loader import Loading, load_directory, load_file
from monitor.logs import redact

GOOD = "-- description: nothing is bad\nSELECT 1 AS one WHERE false\n"


def problems_of(tmp_path: Path, text: str | bytes, name: str = "x.sql") -> list[str]:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    _invariant, problems = load_file(path, "x")
    return [f"{p.line}: {p.message}" for p in problems if p.level == "error"]


def test_a_header_of_nested_aliases_is_refused_at_once_without_expanding_it(
    tmp_path: Path,
) -> None:
    """536 bytes that expand to gigabytes when YAML aliases are followed."""
    levels = ["&a0 [x,x,x,x,x,x,x,x,x]"] + [
        f"&a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)
    ]
    bomb = f"-- description: x\n-- tags: [{', '.join(levels)}]\nSELECT 1 AS a WHERE false\n"
    tracemalloc.start()
    found = problems_of(tmp_path, bomb)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert found == ["2: header anchors and aliases (&name, *name) are not allowed here"]
    assert peak < 5_000_000


@pytest.mark.parametrize(
    ("header", "line", "says"),
    [
        ("-- description: x\n-- timeout: true", 2, "got a true/false"),
        ("-- description: x\n-- timeout: [1]", 2, "got a list"),
        ("-- description: x\n-- timeout: 1000h", 2, "longer than PostgreSQL allows"),
        ("-- description: x\n-- schedule: 0 0 30 2 *", 2, "never fires"),
        ("-- description: x\n-- schedule: every 1ms", 2, "shorter than a second"),
        (
            "-- description: x\n-- severity: critical\n-- severity: info",
            3,
            "'severity' appears twice",
        ),
        ("-- description: x\n-- " + "k" * 70 + ": 1", 2, "unknown header key 'kkkkkkkk"),
        ("-- description: " + "[" * 100, 1, "nested more than 32 levels"),
    ],
)
def test_a_header_that_could_never_run_is_an_error_at_its_line(
    tmp_path: Path, header: str, line: int, says: str
) -> None:
    [found] = problems_of(tmp_path, header + "\nSELECT 1 AS a WHERE false\n")
    assert found.startswith(f"{line}: ") and says in found, found


def test_a_header_echoes_no_more_than_a_short_piece_of_what_it_got(tmp_path: Path) -> None:
    [found] = problems_of(tmp_path, "-- description: x\n-- sample: " + "9" * 3000 + "\nSELECT 1")
    assert len(found) < 300


def test_a_header_bigger_than_a_header_is_refused(tmp_path: Path) -> None:
    lines = "".join(f"-- k{i}: {'v' * 80}\n" for i in range(300))
    [found] = problems_of(tmp_path, "-- description: x\n" + lines + "SELECT 1")
    assert "is 2" in found and "the limit is 16,384" in found


def test_a_file_over_the_size_limit_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    huge = "-- description: x\nSELECT 1 AS a WHERE 1 IN (" + ",".join(["1"] * 200_000) + ")\n"
    (tmp_path / "big.sql").write_text(huge)
    (tmp_path / "ok.sql").write_text(GOOD)
    tracemalloc.start()
    loaded = load_directory(tmp_path, Loading(max_file_bytes=64 * 1024))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [i.name for i in loaded.invariants] == ["ok"]
    assert [p.message for p in loaded.errors] == [
        "the file is larger than 65,536 bytes (limits.file_bytes); an invariant is one query"
    ]
    assert peak < 2_000_000


def test_a_query_too_large_to_judge_is_refused_within_a_memory_bound(tmp_path: Path) -> None:
    values = ",".join(["1"] * 120_000)  # 240 KB of text, a 6 MB parse tree
    text = f"-- description: a long list\nSELECT 1 AS a WHERE 1 IN ({values})\n"
    tracemalloc.start()
    try:
        found = problems_of(tmp_path, text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(found) == 1 and found[0].startswith(
        "2: the query is too large to judge: its parse tree takes 5,"
    )
    assert found[0].endswith("bytes, over 2,000,000; move long lists of values into a table")
    assert peak < 30_000_000


def test_a_byte_order_mark_is_not_a_missing_header(tmp_path: Path) -> None:
    assert problems_of(tmp_path, b"\xef\xbb\xbf" + GOOD.encode()) == []


def test_bytes_that_are_not_utf8_are_a_problem_at_their_line(tmp_path: Path) -> None:
    assert problems_of(tmp_path, GOOD.encode() + b"-- \xff\n") == ["3: not UTF-8 text"]


def test_a_trailing_semicolon_and_comment_leave_a_query_that_runs(tmp_path: Path) -> None:
    path = tmp_path / "x.sql"
    path.write_text("-- description: x\nSELECT 1 AS a WHERE false; -- why\n")
    invariant, problems = load_file(path, "x")
    assert problems == [] and invariant is not None
    assert invariant.sql == "SELECT 1 AS a WHERE false"


def test_files_that_look_like_invariants_but_cannot_be_read_are_each_a_problem(
    tmp_path: Path,
) -> None:
    (tmp_path / "ok.sql").write_text(GOOD)
    (tmp_path / "shout.SQL").write_text(GOOD)
    (tmp_path / "gone.sql").symlink_to(tmp_path / "nowhere.sql")
    (tmp_path / "folder.sql").mkdir()
    loaded = load_directory(tmp_path)
    assert [i.name for i in loaded.invariants] == ["ok"]
    assert sorted((p.path.name, p.message) for p in loaded.problems) == [
        ("gone.sql", "a link to a file that does not exist"),
        ("shout.SQL", "invariant files end in .sql (lower case); rename it"),
    ]


def test_a_linked_folder_is_not_read_and_says_so(tmp_path: Path) -> None:
    """os.walk does not go into a link to a folder, and that went unsaid: a reviewer's
    linked folder held a broken file, and lint passed. It is not followed (a link can loop,
    or reach anywhere on the disk); it is a problem of its own."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "broken.sql").write_text("-- description: x\nSELEC 1\n")
    folder = tmp_path / "invariants"
    folder.mkdir()
    (folder / "ok.sql").write_text(GOOD)
    (folder / "shared").symlink_to(elsewhere, target_is_directory=True)
    (folder / "loop").symlink_to(folder, target_is_directory=True)
    loaded = load_directory(folder)
    assert [i.name for i in loaded.invariants] == ["ok"]
    said = (
        "a link to a folder, which is not read (a link can loop, or reach anywhere on the "
        "disk): move its files here, or link each file"
    )
    assert sorted((p.path.name, p.line, p.message) for p in loaded.problems) == [
        ("loop", 0, said),
        ("shared", 0, said),
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder; the mode cannot bar it")
def test_a_folder_that_cannot_be_read_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "x.sql").write_text(GOOD)
    (tmp_path / "locked").chmod(0)
    try:
        loaded = load_directory(tmp_path)
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert [p.message for p in loaded.problems] == ["cannot read this folder (Permission denied)"]


def test_a_file_name_with_a_newline_cannot_forge_a_line_of_lint_output(tmp_path: Path) -> None:
    forged = "evil\n2026-11-30T00:00:00Z ERROR forged.sql"
    (tmp_path / forged).write_text("-- description: x\nSELECT pg_sleep(1)\n")
    done = cli("lint", str(tmp_path))
    assert done.returncode == 2
    [line] = done.stdout.splitlines()
    assert "evil\\n2026-11-30T00:00:00Z ERROR forged.sql:2:" in line


# --- the config ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            b"defaults: {timeout: [1]}\n",
            "field 'defaults.timeout': expected a duration such as 30s or 5m, got a list",
        ),
        (b"concurrency: 4\n\xff\xfe\n", "the config file is not UTF-8 text (byte 15)"),
        (b"a: &x [1]\nb: *x\n", ":1: anchors and aliases (&name, *name) are not allowed here"),
        (b"concurrency: 2\nconcurrency: 3\n", ":2: 'concurrency' appears twice"),
    ],
)
def test_a_bad_config_is_one_sentence(tmp_path: Path, text: bytes, says: str) -> None:
    path = tmp_path / "invmon.yaml"
    path.write_bytes(text)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert says in str(refused.value)


def test_a_value_that_came_from_a_reference_is_never_echoed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DBPW", "hunter2pass")
    secret = tmp_path / "secret"
    secret.write_text("hunter2pass\n")
    for data in (
        {"concurrency": "${DBPW}"},
        {"defaults": {"timeout": f"${{file:{secret}}}"}},
        {"daemon": {"jitter": "x${DBPW}"}},
    ):
        with pytest.raises(ConfigError) as refused:
            parse_config(data, "invmon.yaml")
        assert "hunter2pass" not in str(refused.value)
        assert "invmon.yaml: field '" in str(refused.value)


def test_a_secret_file_that_never_ends_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"dsn": "${file:/dev/zero}"}, "invmon.yaml")
    assert "secret file '/dev/zero' is not a regular file" in str(refused.value)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 100_000)
    with pytest.raises(ConfigError) as refused:
        parse_config({"dsn": f"${{file:{big}}}"}, "invmon.yaml")
    assert "is larger than 65,536 bytes" in str(refused.value)


@pytest.mark.parametrize(
    ("listen", "ok"),
    [
        ("[::1]:9187", True),
        ("127.0.0.1:9187", True),
        ("::1:9187", False),
        ("[::1]:99999", False),
        ("[::1]", False),
    ],
)
def test_an_ipv6_listen_address_is_taken_in_brackets_or_refused_at_load(
    listen: str, ok: bool
) -> None:
    data = {"http": {"listen": listen}}
    if ok:
        assert parse_config(data, "invmon.yaml").http.listen == listen
    else:
        with pytest.raises(ConfigError) as refused:
            parse_config(data, "invmon.yaml")
        assert "invmon.yaml: field 'http.listen'" in str(refused.value)


@pytest.mark.parametrize(
    ("line", "masked"),
    [
        ("password='a\\'b c' host=db", "password=*** host=db"),
        ("postgresql://:pw@host/db", "postgresql://:***@host/db"),
        ('{"password": "x y", "user": "u"}', '{"password": ***, "user": "u"}'),
        ("password: hunter2", "password: ***"),
        ("PWD=hunter2;next", "PWD=***;next"),
        ("api_key=abc123 ok", "api_key=*** ok"),
    ],
)
def test_the_log_redactor_masks_every_way_a_password_is_written(line: str, masked: str) -> None:
    assert redact(line) == masked


@pytest.mark.parametrize(
    ("dsn", "says"),
    [
        ("postgresql://postgres:hunter2@127.0.0.1:1/postgres", "server: connection failed"),
        ("host=127.0.0.1 password=hunter2 port=notaport", 'invalid integer value "notaport"'),
        ("host='unterminated password=hunter2", ": cannot be read as a PostgreSQL"),
    ],
)
def test_a_bad_admin_dsn_is_one_sentence_for_test_and_demo(
    tmp_path: Path, dsn: str, says: str
) -> None:
    (tmp_path / "invariants").mkdir()
    (tmp_path / "invariants" / "x.sql").write_text(GOOD)
    (tmp_path / "invariants" / "x.test.yaml").write_text("cases:\n  - name: empty\n")
    runs: list[tuple[list[str], dict[str, str]]] = [
        (["test", "--dsn", dsn], {}),
        (["demo", "--dsn", dsn], {}),
    ]
    runs.append((["test"], {"INVMON_TEST_DSN": dsn}))
    for command, env in runs:
        done = cli(*command, cwd=tmp_path, env=env)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert says in done.stderr, (command, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr
        assert "hunter2" not in done.stdout + done.stderr


# --- properties: never a traceback, never unbounded memory ---------------------------------

_YAMLISH = st.text(
    alphabet=st.sampled_from([*"abc:-[]{}&*!|>'\"#,\n 0129.", "\t", "\\", "%", "@", "`"]),
    max_size=400,
)


def _bounded(call: object) -> None:
    tracemalloc.start()
    try:
        call()  # type: ignore[operator]
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 20_000_000


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_YAMLISH)
def test_any_header_gives_an_invariant_or_problems_never_a_traceback(body: str) -> None:
    text = "-- description: x\n" + "".join(f"-- {line}\n" for line in body.split("\n"))

    def parse() -> None:
        try:
            parse_header(split_file(text + "SELECT 1"))
        except HeaderError as exc:
            assert all(isinstance(line, int) and message for line, message in exc.problems)

    _bounded(parse)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_YAMLISH)
def test_any_config_file_gives_a_config_or_one_sentence(
    tmp_path_factory: pytest.TempPathFactory, body: str
) -> None:
    path = tmp_path_factory.mktemp("config") / "invmon.yaml"
    path.write_text(body)

    def parse() -> None:
        try:
            load_config(path)
        except ConfigError as exc:
            assert str(exc).startswith(str(path))

    _bounded(parse)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_YAMLISH)
def test_any_fixture_file_gives_cases_or_problems_at_lines(
    tmp_path_factory: pytest.TempPathFactory, body: str
) -> None:
    path = tmp_path_factory.mktemp("fixture") / "x.test.yaml"
    path.write_text("cases:\n" + body)

    def parse() -> None:
        fixture = load_fixture(path, ("id",))
        assert all(p.line >= 1 and p.message for p in fixture.problems)

    _bounded(parse)


# YAML's structural characters, names, spaces and newlines: texts that nest, anchor and alias.
_YAML_TEXT = st.text(alphabet=list(":?-[]{}&*!|>'\",# \nab01"), max_size=80)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_YAML_TEXT)
def test_the_shortcut_past_the_shape_walk_never_skips_an_anchor_or_deep_nesting(
    text: str,
) -> None:
    """A header skips the walk over its events only when the walk could find nothing."""
    if not yamlsafe._plainly_shallow(text):
        return
    depth = deepest = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            assert not isinstance(event, yaml.AliasEvent), text
            assert getattr(event, "anchor", None) is None, text
            if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                depth += 1
                deepest = max(deepest, depth)
            elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                depth -= 1
    except yaml.YAMLError:
        pass  # invalid YAML: load() reports it with its line either way
    assert deepest <= yamlsafe.MAX_DEPTH, text
