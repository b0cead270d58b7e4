"""Date-sharded tables: `events_20260101` is one day of the family `events_yyyymmdd`.

BigQuery shards a table by day into tables named `<prefix>YYYYMMDD` (mostly `<prefix>_YYYYMMDD`)
and shows them as one family; a wildcard table `events_*` reads every table whose name starts
with `events_`, its `_TABLE_SUFFIX` pseudo-column choosing which. Only an eight-digit calendar
date is a shard suffix, as in BigQuery: `events_2026_01_01` and `events_202601` are tables of
their own. A shard or a wildcard resolves to its family `events_yyyymmdd` when the schema names
the family (a key for the shard itself wins); otherwise it stays as written. A wildcard that
matches other tables the schema names reads them too, which is said (a gap), not traced.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from datetime import datetime
from typing import NamedTuple

FAMILY_SUFFIX = "_yyyymmdd"
TABLE_SUFFIX = "_table_suffix"  # the pseudo-column naming the shard a wildcard row came from

_SHARD = re.compile(r"^(?P<base>.+?)_?(?P<date>\d{8})$")
_FAMILY = re.compile(rf"^(?P<base>.+){FAMILY_SUFFIX}$")
_PARTIAL_DATE = re.compile(r"^_?\d{0,8}$")


class ShardResolution(NamedTuple):
    """What a table reference resolves to, and the other tables a wildcard also reads."""

    name: str
    also_read: tuple[str, ...] = ()


def is_wildcard(name: str) -> bool:
    """`ds.events_*`: a BigQuery wildcard table."""
    return name.endswith("*")


def shard_family(name: str) -> str | None:
    """`ds.events_20260101` -> `ds.events_yyyymmdd`; None when the name is no date shard."""
    qualifier, last = _split(name)
    match = _SHARD.match(last)
    if match is None or match["base"][-1].isdigit() or not _is_date(match["date"]):
        return None  # `t_120260101`: nine digits are no date
    return f"{qualifier}{match['base']}{FAMILY_SUFFIX}"


def resolve_shard(name: str, known: Collection[str]) -> ShardResolution:
    """The family a shard or wildcard belongs to when `known` names it; else `name` itself."""
    if name in known:
        return ShardResolution(name)
    if is_wildcard(name):
        return _resolve_wildcard(name, known)
    family = shard_family(name)
    if family is not None and family in known:
        return ShardResolution(family)
    return ShardResolution(name)


def _resolve_wildcard(name: str, tables: Collection[str]) -> ShardResolution:
    qualifier, last = _split(name)
    prefix = last[:-1]
    read = sorted(t for t in tables if t.startswith(qualifier) and _reads(prefix, t, qualifier))
    families = [t for t in read if _own_family(prefix, _split(t)[1])]
    if len(families) == 1:
        return ShardResolution(families[0], tuple(t for t in read if t != families[0]))
    return ShardResolution(name, tuple(read))


def _reads(prefix: str, table: str, qualifier: str) -> bool:
    """Whether wildcard `<qualifier><prefix>*` reads `table` (a family: any of its shards)."""
    table_qualifier, last = _split(table)
    if table_qualifier != qualifier:
        return False
    family = _FAMILY.match(last)
    if family is None:
        return last.startswith(prefix)
    return any(
        stem.startswith(prefix) or (prefix.startswith(stem) and prefix[len(stem) :].isdigit())
        for stem in (f"{family['base']}_", family["base"])
    )


def _own_family(prefix: str, last: str) -> bool:
    """`events_*`, `events_2026*` and `events*` are wildcards over `events_yyyymmdd` itself."""
    family = _FAMILY.match(last)
    if family is None or not prefix.startswith(family["base"]):
        return False
    return _PARTIAL_DATE.match(prefix[len(family["base"]) :]) is not None


def _split(name: str) -> tuple[str, str]:
    """`proj.ds.events` -> (`proj.ds.`, `events`)."""
    qualifier, dot, last = name.rpartition(".")
    return f"{qualifier}{dot}", last


def _is_date(digits: str) -> bool:
    try:
        datetime.strptime(digits, "%Y%m%d")
    except ValueError:
        return False
    return True
