"""Instants as integer microseconds since the epoch: the unit edge validity is compared in.

The in-memory graph and the stored columnar index both hold an edge's interval as two
int64s, so "valid at t" is two integer comparisons in numpy; an open end is int64's bound.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
OPEN_START = -(2**63)  # an interval open at its start: numpy's int64 minimum
OPEN_END = 2**63 - 1  # open at its end (still valid): int64's maximum


def micros(dt: datetime) -> int:
    """Microseconds since the epoch, exact; naive datetimes are taken as UTC."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - EPOCH) // MICROSECOND
