"""The long-running process: the timetable, the fleet's shares, reloading on change, the
watchdog that proves the loop is alive, metrics, the HTTP listener and supervision.

A composition of the layers below: it schedules evaluations, records them in the store and
hands incidents to `alerts`. Threads live here and nowhere below.
"""
