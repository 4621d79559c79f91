"""Alert delivery: turns the monitor's incident events into messages (Slack, or the console).

The monitor package decides *what* happened; this package only decides how it is shown and
makes sure each message is delivered once.
"""
