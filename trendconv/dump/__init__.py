"""The msprobe dump format: how one (step, rank) of dump.json + construct.json becomes trend rows."""
