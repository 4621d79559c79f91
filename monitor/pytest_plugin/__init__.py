"""The pytest plugin: the project's invariant files asserted inside the application's own
tests. plugin.py is what pytest loads; checks.py the fixture's object; verdicts.py its pure
decisions; project.py which files a session reads."""
