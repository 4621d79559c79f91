"""`python -m monitor.cli`: the same entry point as the installed `invmon`."""

from monitor.cli.commands import main

main()
