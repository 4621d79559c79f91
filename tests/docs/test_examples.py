"""Every example in the README and the manual does what the page says, checked with Sybil's
Markdown parsers (one test per page, its examples in order, every failure at its line):

- a `yaml` block is a config (loaded by invmon's own loader) or, with `cases:`, the test
  cases of the invariant above it (which `invmon lint` checks with it);
- a `sql` block with a header is an invariant file, and passes `invmon lint`; after
  `<!-- invmon-file: PATH -->` it is written to PATH for the commands below it instead;
- in a `sh` block, each `invmon` command names a command and flags that exist, each
  `pytest -k` names tests that exist, and each path under deploy/, bench/, docs/, tests/,
  examples/ or invariants/ exists;
- an `output` block is what the last `invmon` command above it prints (`…` stands for text
  that differs between runs, such as a duration), as consecutive lines of its output;
- a `python` block compiles, each `invariants.NAME(…)` it calls is a method of the pytest
  plugin's fixture taking those keywords, and each `pytest.mark.invariants(…)` takes only
  the marker's keywords; `--invmon-*` flags in a `sh` block are the plugin's.

`<!-- skip: next -->` before a block says it is a sketch, not something to run."""

from __future__ import annotations

import ast
import inspect
import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown import CodeBlockParser, SkipParser

from monitor.cli.commands import main
from monitor.config.loading import load_config
from monitor.pytest_plugin import plugin
from monitor.pytest_plugin.checks import InvariantChecks

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(["README.md", *(p.relative_to(ROOT).as_posix() for p in ROOT.glob("docs/*.md"))])
CHECKED_PATHS = re.compile(r"^(deploy|bench|docs|tests|examples|invariants)/[\w./-]+$")
TEST_NAMES = " ".join(
    re.findall(r"def (test_\w+)", " ".join(p.read_text() for p in ROOT.glob("tests/**/*.py")))
)


def _invmon(args: list[str], cwd: Path) -> click.testing.Result:
    old = Path.cwd()
    os.chdir(cwd)  # the commands read ./invmon.yaml and relative paths, as in a shell
    try:
        return CliRunner().invoke(main, args, catch_exceptions=False)
    finally:
        os.chdir(old)


def check_yaml(example: Example) -> None:
    here: Path = example.namespace["workdir"]
    text = str(example.parsed)
    if re.search(r"^cases:", text, re.M):
        invariant: Path | None = example.namespace.get("invariant")
        assert invariant is not None, "test cases with no invariant above them on the page"
        invariant.with_suffix(".test.yaml").write_text(text)
        done = _invmon(["lint", str(invariant.parent)], here)
        assert done.exit_code == 0, f"invmon lint refused the cases: {done.output}"
        return
    path = here / "invmon.yaml"
    path.write_text(text)
    load_config(path)  # raises ConfigError naming the field


def check_sql(example: Example) -> None:
    here: Path = example.namespace["workdir"]
    text = str(example.parsed)
    target: str | None = example.namespace.pop("next_file", None)
    if target is not None:
        (here / target).parent.mkdir(parents=True, exist_ok=True)
        (here / target).write_text(text)
        return
    assert text.startswith("-- description:"), (
        "a sql block that is not an invariant file: mark it `<!-- skip: next -->`"
    )
    folder = here / f"example_{example.line}"
    folder.mkdir()
    invariant = folder / "example.sql"
    invariant.write_text(text)
    example.namespace["invariant"] = invariant
    done = _invmon(["lint", str(folder)], here)
    assert done.exit_code == 0, f"invmon lint refused it: {done.output}"


def _command_of(tokens: list[str]) -> click.Command:
    command: click.Command = main
    for word in tokens[1:]:
        if not isinstance(command, click.Group) or word.startswith("-"):
            break
        names = [n for n in word.split("|")]  # `ack|unack` names two
        found = [command.commands.get(n) for n in names]
        if not all(found):
            if command is main:
                raise AssertionError(f"`invmon {word}`: no such command")
            break
        command = found[-1] or command
    return command


def _check_invmon(tokens: list[str]) -> None:
    command = _command_of(tokens)
    flags = {"--help", "--version"}
    for param in command.params:
        flags.update(getattr(param, "opts", []))
        flags.update(getattr(param, "secondary_opts", []))
    for token in tokens[1:]:
        for flag in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", token.split("=")[0]):
            assert flag in flags, f"`{' '.join(tokens)}`: {command.name} has no {flag}"


PLUGIN_FLAGS = set(re.findall(r'"(--invmon-[\w-]+)"', inspect.getsource(plugin)))
MARKER_KEYWORDS = {"select", "eventually", "timeout", "poll", "quiet"}


def _check_pytest(tokens: list[str]) -> None:
    for token in tokens:
        flag = token.split("=")[0]
        if flag.startswith("--invmon-"):
            assert flag in PLUGIN_FLAGS, f"`{' '.join(tokens)}`: the plugin has no {flag}"
    if "-k" in tokens:
        expression = tokens[tokens.index("-k") + 1]
        for word in re.findall(r"[A-Za-z_]\w*", expression):
            if word not in ("and", "or", "not"):
                assert word in TEST_NAMES, f"`pytest -k {expression}`: no test is named {word}"


def check_sh(example: Example) -> None:
    text = re.sub(r"\\\n", " ", str(example.parsed))
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        for segment in re.split(r"&&|;|\s\|\s", line):
            try:
                tokens = shlex.split(segment)
            except ValueError:
                tokens = segment.split()
            if not tokens:
                continue
            if tokens[0] == "invmon":
                _check_invmon(tokens)
                example.namespace["command"] = tokens[1:]
            if tokens[:3] == ["python", "-m", "pytest"]:
                _check_pytest(tokens)
            created = tokens[-1] if tokens[0] in ("cp", "install", "mkdir") else None
            for token in tokens[1:]:
                if CHECKED_PATHS.match(token) and token != created and "*" not in token:
                    assert (ROOT / token).exists(), f"`{segment.strip()}`: no file {token}"


def _keywords(call: ast.Call) -> set[str]:
    return {k.arg for k in call.keywords if k.arg is not None}


def check_python(example: Example) -> None:
    tree = ast.parse(str(example.parsed))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        if isinstance(owner, ast.Name) and owner.id == "invariants":
            method = getattr(InvariantChecks, node.func.attr, None)
            assert method is not None, f"the invariants fixture has no {node.func.attr}()"
            accepted = set(inspect.signature(method).parameters) - {"self"}
            unknown = _keywords(node) - accepted
            assert not unknown, f"invariants.{node.func.attr}() takes no {sorted(unknown)}"
        if ast.unparse(owner) == "pytest.mark" and node.func.attr == "invariants":
            unknown = _keywords(node) - MARKER_KEYWORDS
            assert not unknown, f"the invariants marker takes no {sorted(unknown)}"


def check_output(example: Example) -> None:
    command: list[str] | None = example.namespace.get("command")
    assert command is not None, "an output block with no invmon command above it"
    if command == ["demo"]:
        command = ["demo", "--dsn", example.namespace["admin_dsn"]]  # the suite's server
    done = _invmon(command, example.namespace["workdir"])
    produced = [line.rstrip() for line in done.output.splitlines()]
    wanted = [line.rstrip() for line in str(example.parsed).rstrip("\n").splitlines()]
    patterns = [re.compile(".*".join(map(re.escape, w.split("…"))) + "$") for w in wanted]
    for start in range(len(produced) - len(wanted) + 1):
        window = produced[start : start + len(wanted)]
        if all(p.match(line) for p, line in zip(patterns, window, strict=True)):
            return
    raise AssertionError(
        f"`invmon {' '.join(command)}` does not print these lines:\n"
        + "\n".join(wanted)
        + "\n--- it printed:\n"
        + done.output
    )


def next_file(example: Example) -> None:
    example.namespace["next_file"] = example.parsed


class FileDirective:
    """`<!-- invmon-file: PATH -->`: the next sql block is written to PATH."""

    PATTERN = re.compile(r"^<!-- invmon-file: (?P<path>\S+) -->$", re.M)

    def __call__(self, document: Document) -> Iterator[Region]:
        for match in self.PATTERN.finditer(document.text):
            yield Region(match.start(), match.end(), match["path"], next_file)


SYBIL = Sybil(
    parsers=[
        CodeBlockParser("yaml", check_yaml),
        CodeBlockParser("sql", check_sql),
        CodeBlockParser("sh", check_sh),
        CodeBlockParser("output", check_output),
        CodeBlockParser("python", check_python),
        FileDirective(),
        SkipParser(),
    ],
    path=str(ROOT),
)


@pytest.mark.parametrize("page", PAGES)
def test_every_example_on_the_page_does_what_it_says(
    page: str, admin_dsn: str, tmp_path: Path
) -> None:
    document = SYBIL.parse(ROOT / page)
    document.namespace.update(workdir=tmp_path, admin_dsn=admin_dsn)
    failures: list[str] = []
    for example in document.examples():
        try:
            example.evaluate()
        except Exception as error:  # every example's failure, not only the first
            failures.append(f"{page}:{example.line}: {str(error).split(chr(10) + 'assert ')[0]}")
    if failures:  # every failure at its line, in full
        pytest.fail("\n\n".join(failures), pytrace=False)


def test_the_readme_lists_every_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("\n## Commands\n", 1)[1].split("```", 2)[1]
    listed = set()
    for line in block.splitlines()[1:]:
        words = line.split()
        group = main.commands.get(words[1])
        listed.add(f"{words[1]} {words[2]}" if isinstance(group, click.Group) else words[1])
    every = {
        f"{name} {sub}" if isinstance(command, click.Group) else name
        for name, command in main.commands.items()
        for sub in (command.commands if isinstance(command, click.Group) else [""])
    }
    assert listed == every


def test_every_link_in_the_readme_and_security_policy_names_a_file_that_exists() -> None:
    """mkdocs checks the manual's links; these two pages live outside it."""
    broken = []
    for page in ("README.md", "SECURITY.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        for target in re.findall(r"\]\((?!https?://|#)([^)#\s]+)", text):
            if not (ROOT / target).exists():
                broken.append(f"{page}: {target}")
    assert broken == []


def test_every_pointer_to_a_section_in_messages_and_deploy_files_names_one_that_exists() -> None:
    """An error message or a shipped file that says where to read on must name a page and a
    heading that are there: `(docs/operating.md: Recovering the state store)`. Pointers into
    the README by section (`README: Configuration`) went stale when the manual moved out."""
    headings: dict[str, set[str]] = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        found = {m.strip() for m in re.findall(r"^#+ (.+)$", text, re.M)}
        headings[str(page.relative_to(ROOT))] = found
    pointer = re.compile(r"""(README|docs/[\w-]+\.md)(?:[,:] *|\s+)["'“]?([A-Z][^"'”)\n]*)""")
    stale, seen = [], 0
    files = [*ROOT.glob("monitor/**/*.py"), *ROOT.glob("alerts/**/*.py")]
    files += [p for p in ROOT.glob("deploy/**/*") if p.is_file() and p.suffix in (".yaml", ".sql")]
    for path in files:
        text = path.read_text(encoding="utf-8")
        # A message may be split over string literals: join adjacent ones before reading.
        text = re.sub(r'"\s*\n\s*"', "", text)
        for named, heading in pointer.findall(text):
            target = "README.md" if named == "README" else named
            words = heading.strip()
            if target not in headings:
                stale.append(f"{path.relative_to(ROOT)}: {target} does not exist")
                continue
            if any(words.startswith(h) for h in headings[target]):
                seen += 1
            elif target == "README.md" or words in {"Recovering the state store"}:
                stale.append(f"{path.relative_to(ROOT)}: no heading {words!r} in {target}")
    assert stale == []
    assert seen >= 5  # the pointers this test was written for are read
