"""The msprobe monitor CSV format (monitor-format.md): cell rules and one CSV file → normalized rows."""
