"""``python -m memcalc``."""

from memcalc.cli import run

run()
