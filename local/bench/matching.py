"""How broad the Postgres candidate predicate is, and what the full-scan recount costs.

On Postgres, locate selects candidates with a LIKE superset (`erasure.matching`) and Python
decides on each candidate value. This builds a table of realistic stored emails and phone
numbers (seeded: mostly lower-case ASCII, some capitalised, padded or accented, phones in
national and international formats, some annotated), picks targets among them, and prints
for each identifier type: candidate rows against exact matches (the prefilter's ratio), the
time of one candidate count, of locate's exact selection (candidates, Python, `IN`), and of
`count_by_scan` (every distinct value read and decided in Python, as verify does).
`BENCH_MATCHING_ROWS` sets the row count (default 100,000); `BENCH_POSTGRES_URL` the
server's admin database (default the local one). Needs a running PostgreSQL.
"""

from __future__ import annotations

import os
import random
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from erasure.matching import Matcher, candidate_predicate, count_by_scan, exact_predicate

ROWS = int(os.environ.get("BENCH_MATCHING_ROWS", "100000"))
ADMIN_URL = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
TARGETS = 100
SEED = 20260817

_FIRST_NAMES = (
    "james mary john patricia robert jennifer michael linda david elizabeth william barbara "
    "richard susan joseph jessica thomas sarah charles karen chris lisa daniel nancy matthew "
    "betty anthony sandra mark ashley steven kimberly paul emily andrew donna joshua michelle "
    "kenneth carol kevin amanda brian melissa george deborah timothy stephanie ronald rebecca "
    "oliver amelia harry isla jack ava noah mia leo ivy oscar freya arthur lily muhammad grace"
)
_LAST_NAMES = (
    "smith jones williams taylor brown davies evans wilson thomas johnson roberts robinson "
    "thompson wright walker white edwards hughes green hall lewis harris clarke patel jackson "
    "wood turner martin cooper hill ward morris moore clark lee king baker harrison morgan "
    "allen james scott phillips watson davis parker price bennett young griffiths mitchell "
    "kelly cook carter richardson bailey collins bell shaw murphy miller cox richards khan"
)
_FIRST = _FIRST_NAMES.split()
_LAST = _LAST_NAMES.split()
_ACCENTED = ("müller", "józef", "zoë", "françois", "søren", "łukasz", "dvořák", "núñez")
_DOMAINS = (
    ("gmail.com", 30),
    ("outlook.com", 12),
    ("hotmail.co.uk", 10),
    ("yahoo.com", 8),
    ("icloud.com", 6),
    ("btinternet.com", 4),
    ("example.co.uk", 3),
    ("proton.me", 2),
    ("nhs.net", 2),
    ("company.com", 2),
)


def _email(rng: random.Random) -> str:
    first = rng.choice(_ACCENTED) if rng.random() < 0.03 else rng.choice(_FIRST)
    last = rng.choice(_LAST)
    local = rng.choice(
        (
            f"{first}.{last}",
            f"{first}{last}",
            f"{first[0]}.{last}",
            f"{first}_{last}",
            f"{first}.{last}{rng.randint(1, 99)}",
            f"{last}.{first}",
            f"{first}{rng.randint(70, 99)}",
        )
    )
    domains, weights = zip(*_DOMAINS, strict=True)
    value = f"{local}@{rng.choices(domains, weights)[0]}"
    roll = rng.random()
    if roll < 0.10:
        value = value.title()
    elif roll < 0.12:
        value = value.upper()
    if rng.random() < 0.02:
        value = rng.choice((" ", "\t", "\u00a0", "\u200b")) + value + rng.choice(("", " ", "\n"))
    return value


def _phone(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.55:
        digits = "07" + "".join(rng.choice("0123456789") for _ in range(9))  # mobile
        national = f"{digits[:5]} {digits[5:]}"
    elif roll < 0.85:
        digits = "020" + "".join(rng.choice("0123456789") for _ in range(8))
        national = f"{digits[:3]} {digits[3:7]} {digits[7:]}"
    else:
        national = rng.choice(
            (
                "+33 6 {0:02d} {1:02d} {2:02d} {3:02d}",
                "+49 151 {0:02d}{1:02d}{2:02d}{3:02d}",
                "+1 (212) 555-{0:02d}{1:02d}",
                "+353 87 {0:02d}{1:01d} {2:02d}{3:02d}",
            )
        ).format(*(rng.randint(0, 99) for _ in range(4)))
        return national
    form = rng.random()
    if form < 0.25:
        value = "+44 " + national[1:]
    elif form < 0.35:
        value = national.replace(" ", "")
    elif form < 0.45:
        value = national.replace(" ", "-")
    else:
        value = national
    if rng.random() < 0.03:
        value = rng.choice(("{} (mobile)", "Tel: {}", "{} ext. 12", "{} (home)")).format(value)
    return value


def main() -> None:
    """Print candidate/exact ratios and timings for emails and phones on Postgres."""
    admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"bench_matching_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError:
        print(f"  no PostgreSQL at {sa.make_url(ADMIN_URL).host}: skipped")
        admin.dispose()
        return
    url = sa.make_url(ADMIN_URL).set(database=name)
    engine = sa.create_engine(url, hide_parameters=True)
    try:
        print(f"postgres candidate prefilter: {ROWS:,} rows, {TARGETS} targets per type")
        _bench(engine, "email", Matcher("email", "email"), _email)
        _bench(engine, "phone", Matcher("phone", "e164", "GB"), _phone)
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _bench(
    engine: sa.Engine, table_name: str, matcher: Matcher, make: Callable[[random.Random], str]
) -> None:
    rng = random.Random(f"{SEED}:{table_name}")
    values = [make(rng) for _ in range(ROWS)]
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {table_name} (id INT PRIMARY KEY, value TEXT)"))
        conn.execute(
            sa.text(f"INSERT INTO {table_name} VALUES (:id, :value)"),
            [{"id": i, "value": v} for i, v in enumerate(values)],
        )
        conn.execute(sa.text(f"ANALYZE {table_name}"))
    table = sa.Table(table_name, sa.MetaData(), autoload_with=engine)
    canonical = [matcher.canonical(v) for v in values]
    named = [c for c in canonical if c is not None]
    targets = rng.sample(sorted(set(named)), TARGETS)
    rows_of = {t: 0 for t in targets}
    for c in named:
        if c in rows_of:
            rows_of[c] += 1

    candidates, t_candidate, t_exact = [], [], []
    with engine.connect() as conn:
        for target in targets:
            count = sa.select(sa.func.count()).select_from(table)
            start = time.perf_counter()
            n = conn.execute(count.where(candidate_predicate(table.c.value, matcher, {target})))
            candidates.append(int(n.scalar_one()))
            t_candidate.append(time.perf_counter() - start)
            start = time.perf_counter()
            predicate = exact_predicate(conn, table, table.c.value, matcher, {target})
            exact = int(conn.execute(count.where(predicate)).scalar_one())
            t_exact.append(time.perf_counter() - start)
            assert exact == rows_of[target], (exact, rows_of[target])
        start = time.perf_counter()
        scanned = count_by_scan(conn, table.c.value, matcher, {targets[0]})
        t_scan = time.perf_counter() - start
        assert scanned == rows_of[targets[0]]
        distinct = conn.execute(sa.select(sa.func.count(sa.distinct(table.c.value)))).scalar_one()

    exact_total = sum(rows_of.values())
    ratios = [c / rows_of[t] for c, t in zip(candidates, targets, strict=True)]
    non_ascii = sum(1 for v in values if not v.isascii())
    print(
        f"  {table_name} ({matcher.normalise}; {non_ascii / ROWS:.1%} of values non-ASCII): "
        f"candidates {sum(candidates):,} for {exact_total:,} exact rows"
        f" = {sum(candidates) / exact_total:.2f}x"
        f" (per target median {statistics.median(ratios):.1f}x, max {max(ratios):.1f}x,"
        f" {sum(candidates) / len(targets) / ROWS:.4%} of the table)"
    )
    print(
        f"    one candidate count {_ms(t_candidate)}, locate's exact selection {_ms(t_exact)};"
        f" count_by_scan {t_scan:.2f} s ({distinct:,} distinct values decided in Python)"
    )


def _ms(seconds: list[Any]) -> str:
    return f"median {statistics.median(seconds) * 1000:.0f} ms"


if __name__ == "__main__":
    main()
