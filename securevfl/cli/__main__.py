"""``python -m securevfl.cli``: the ``securevfl`` command (how launch starts each party)."""

from securevfl.cli import entry

entry()
