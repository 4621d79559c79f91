"""The `invmon` command line: argument parsing and rendering only; every decision is made by the
layers below. `python -m monitor.cli` runs it as the installed `invmon` does.
"""
