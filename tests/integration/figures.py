"""Counts the integration tests report at the end of the run (see conftest.py)."""

from __future__ import annotations

import collections

# "secret searches": one secret looked for in one playbook run's whole output;
# "secrets leaked": those found (each also fails its test).
TALLY = collections.Counter()
