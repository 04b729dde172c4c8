"""``python -m troupe``: the same command as ``troupe`` (see :mod:`troupe.main`)."""

from troupe.main import run

run()
