"""The msprobe monitor CSV format (docs/monitor-format.md): cell rules and one CSV file → normalized rows."""
