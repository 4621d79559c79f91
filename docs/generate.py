"""Write the manual's generated reference pages from the code: `python docs/generate.py`.
tests/cli/test_manual.py fails when a committed page differs from what this writes."""

from __future__ import annotations

from pathlib import Path

from monitor.cli.commands import main
from monitor.cli.manual import commands_page, config_page

HERE = Path(__file__).resolve().parent
PAGES = {"commands.md": lambda: commands_page(main), "configuration.md": config_page}

if __name__ == "__main__":
    for name, make in PAGES.items():
        (HERE / name).write_text(make(), encoding="utf-8")
        print(f"wrote docs/{name}")
