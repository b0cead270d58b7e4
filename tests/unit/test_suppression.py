"""Tombstones, the suppression list on SQLite (a subject's tombstones looked up on Postgres too),
and the ingest filter."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from erasure.catalog import Catalog
from erasure.errors import SubjectError, SuppressionError
from erasure.model import Identity
from erasure.pseudonym import Pepper, normalise, subject_hash
from erasure.store import Store, open_store
from erasure.suppression import (
    IdentifierColumn,
    SuppressionFilter,
    SuppressionList,
    Tombstone,
    check_subject,
    identifier_columns,
)

V1 = Pepper(version=1, secret=b"\x01" * 32)
V2 = Pepper(version=2, secret=b"\x02" * 32)
EMAIL = "jane.doe@example.com"
PHONE_E164 = "+442079460958"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as store:
        yield store


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return Catalog.model_validate(
        {
            "version": 1,
            "identifiers": {
                "email": {"normalise": "email"},
                "phone": {"normalise": "e164", "default_region": "GB"},
                "customer_id": {"normalise": "strip"},
            },
            "connections": {"warehouse": {"url": f"sqlite:///{tmp_path}/wh.db"}},
            "datasets": [
                {
                    "namespace": "warehouse",
                    "name": "crm.customers",
                    "connection": "warehouse",
                    "kind": "table",
                    "holds_subject": {
                        "email": ["email", "alt_email"],
                        "phone": "phone",
                        "customer_id": "id",
                    },
                }
            ],
        }
    )


def tomb(pepper: Pepper, id_type: str, normalised: str, ref: str | None = "req-1") -> Tombstone:
    return Tombstone.for_subject(pepper, id_type, normalised, request_ref=ref)


# -- Tombstone -------------------------------------------------------------------------------


def test_tombstone_carries_the_keyed_hash_and_pepper_version() -> None:
    t = tomb(V2, "email", EMAIL)
    assert t.subject_hash == subject_hash(V2, "email", EMAIL)
    assert t.pepper_version == 2
    assert t.created_at.utcoffset() is not None
    assert EMAIL not in t.model_dump_json()


@pytest.mark.parametrize("bad", [EMAIL, "A" * 64, "a" * 63, ""])
def test_tombstone_refuses_anything_but_a_lowercase_hex_hash(bad: str) -> None:
    with pytest.raises(ValidationError):
        Tombstone(subject_hash=bad, identifier_type="email", pepper_version=1)


def test_tombstone_refuses_a_naive_timestamp() -> None:
    with pytest.raises(ValidationError):
        Tombstone(
            subject_hash="a" * 64,
            identifier_type="email",
            pepper_version=1,
            created_at=datetime(2025, 1, 1),
        )


# -- SuppressionList -------------------------------------------------------------------------


def test_add_is_idempotent_and_keeps_the_first_tombstone(store: Store) -> None:
    suppression = SuppressionList(store)
    first = tomb(V1, "email", EMAIL, ref="req-1")
    assert suppression.add(first) is True
    assert suppression.add(tomb(V1, "email", EMAIL, ref="req-2")) is False
    assert suppression.count() == 1
    [found] = suppression.check("email", EMAIL, [V1], lambda v: normalise("email", v))
    assert found == first


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The store once on SQLite and once on Postgres."""
    url = (
        f"sqlite:///{tmp_path}/erasure.db"
        if request.param == "sqlite"
        else str(request.getfixturevalue("postgres_schema_url"))
    )
    with open_store(url) as store:
        yield store


def test_the_tombstones_of_a_subject_s_identities_come_oldest_first(any_store: Store) -> None:
    # Who erased a subject, and when: the request that wrote the first of its tombstones.
    suppression = SuppressionList(any_store)
    older = tomb(V1, "customer_id", "C1", ref="req-1").model_copy(
        update={"created_at": datetime(2026, 11, 2, 9, tzinfo=UTC)}
    )
    newer = tomb(V2, "email", EMAIL, ref="req-2").model_copy(
        update={"created_at": datetime(2026, 11, 20, 9, tzinfo=UTC)}
    )
    for stone in (newer, older, tomb(V1, "email", "other@example.com", ref="req-3")):
        suppression.add(stone)
    identities = [Identity("email", EMAIL), Identity("customer_id", "C1")]
    assert suppression.tombstones_of(identities, [V1, V2]) == [older, newer]
    assert suppression.tombstones_of(identities, [V1]) == [older]  # under the peppers given
    assert suppression.tombstones_of([], [V1, V2]) == []


def test_contains_and_hashes_are_per_pepper_version(store: Store) -> None:
    suppression = SuppressionList(store)
    t1, t2 = tomb(V1, "email", EMAIL), tomb(V2, "email", "other@example.com")
    suppression.add(t1)
    suppression.add(t2)
    assert suppression.contains(t1.subject_hash, 1)
    assert not suppression.contains(t1.subject_hash, 2)
    assert suppression.hashes_for(1) == {t1.subject_hash}
    assert suppression.hashes_for(3) == set()
    assert suppression.hashes_by_version() == {1: {t1.subject_hash}, 2: {t2.subject_hash}}
    assert suppression.count() == 2


def test_check_normalises_and_finds_a_tombstone_written_before_a_rotation(store: Store) -> None:
    suppression = SuppressionList(store)
    suppression.add(tomb(V1, "email", EMAIL))
    found = suppression.check("email", "  Jane.DOE@Example.com ", [V1, V2], _email)
    assert [t.pepper_version for t in found] == [1]
    assert suppression.check("email", "someone.else@example.com", [V1, V2], _email) == []


def test_check_refuses_a_malformed_identifier_without_echoing_it(store: Store) -> None:
    with pytest.raises(SubjectError) as info:
        SuppressionList(store).check("email", "not-an-email", [V1], _email)
    assert "not-an-email" not in str(info.value)


def test_check_subject_normalises_as_the_catalog_says(store: Store, catalog: Catalog) -> None:
    SuppressionList(store).add(tomb(V1, "phone", PHONE_E164))
    found = check_subject(store, catalog, "phone", "020 7946 0958", [V1, V2])
    assert [(t.identifier_type, t.pepper_version) for t in found] == [("phone", 1)]


def test_check_subject_names_the_allowed_types(store: Store, catalog: Catalog) -> None:
    with pytest.raises(SubjectError, match="allowed: customer_id, email, phone") as info:
        check_subject(store, catalog, EMAIL, "x", [V1])
    assert EMAIL not in str(info.value)  # a value typed where the type belongs is not echoed


def test_an_unmigrated_store_raises_suppression_error(tmp_path: Path) -> None:
    with (
        open_store(f"sqlite:///{tmp_path}/bare.db", migrate=False) as bare,
        pytest.raises(SuppressionError, match="migrated"),
    ):
        SuppressionList(bare).count()


def test_logs_carry_hashes_and_types_never_the_identifier(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    t = tomb(V1, "email", EMAIL)
    SuppressionList(store).add(t)
    SuppressionList(store).check("email", EMAIL, [V1], _email)
    assert t.subject_hash in caplog.text
    assert EMAIL not in caplog.text


# -- SuppressionFilter -----------------------------------------------------------------------

COLUMNS = {
    "email": IdentifierColumn("email", "email"),
    "alt_email": IdentifierColumn("email", "email"),
    "phone": IdentifierColumn("phone", "e164", default_region="GB"),
}


def suppressed(*tombstones: Tombstone) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for t in tombstones:
        out.setdefault(t.pepper_version, set()).add(t.subject_hash)
    return out


def ids(rows: Iterator[dict[str, Any]]) -> list[int]:
    return [row["id"] for row in rows]


def test_a_tombstoned_email_is_dropped_whatever_its_case_and_whitespace() -> None:
    flt = SuppressionFilter(COLUMNS, [V1], suppressed(tomb(V1, "email", EMAIL)))
    rows = [
        {"id": 1, "email": "  JANE.Doe@EXAMPLE.com\t"},
        {"id": 2, "email": "john@example.com"},
    ]
    assert ids(flt.filter(rows)) == [2]
    assert (flt.counts.read, flt.counts.loaded, flt.counts.suppressed) == (2, 1, 1)
    assert flt.counts.suppressed_by_type == {"email": 1}


def test_a_tombstoned_phone_is_dropped_in_national_format() -> None:
    tombstone = tomb(V1, "phone", normalise("e164", "+44 20 7946 0958"))
    flt = SuppressionFilter(COLUMNS, [V1], suppressed(tombstone))
    rows = [{"id": 1, "phone": "020 7946 0958"}, {"id": 2, "phone": "020 7946 0959"}]
    assert ids(flt.filter(rows)) == [2]


def test_every_identifier_column_is_checked_not_only_the_first() -> None:
    flt = SuppressionFilter(COLUMNS, [V1], suppressed(tomb(V1, "email", EMAIL)))
    rows = [
        {"id": 1, "email": "clean@example.com", "alt_email": EMAIL, "phone": None},
        {"id": 2, "email": "clean@example.com", "alt_email": None, "phone": None},
    ]
    assert ids(flt.filter(rows)) == [2]
    assert flt.counts.suppressed == 1


def test_a_tombstone_under_an_old_pepper_still_suppresses_after_rotation() -> None:
    old = tomb(V1, "email", EMAIL)
    new = tomb(V2, "email", "later@example.com")
    flt = SuppressionFilter(COLUMNS, [V1, V2], suppressed(old, new))
    rows = [
        {"id": 1, "email": EMAIL},
        {"id": 2, "email": "later@example.com"},
        {"id": 3, "email": "kept@example.com"},
    ]
    assert ids(flt.filter(rows)) == [3]
    assert flt.counts.suppressed == 2


def test_tombstones_without_their_pepper_fail_closed() -> None:
    with pytest.raises(SuppressionError, match=r"pepper version\(s\) \[1\]"):
        SuppressionFilter(COLUMNS, [V2], suppressed(tomb(V1, "email", EMAIL)))


def test_a_filter_needs_peppers_and_identifier_columns() -> None:
    with pytest.raises(SuppressionError, match="no pepper"):
        SuppressionFilter(COLUMNS, [], {})
    with pytest.raises(SuppressionError, match="no identifier columns"):
        SuppressionFilter({}, [V1], {})


def test_two_secrets_for_one_pepper_version_are_refused() -> None:
    with pytest.raises(SuppressionError, match="version 1"):
        SuppressionFilter(COLUMNS, [V1, Pepper(version=1, secret=b"x" * 32)], {})


def test_an_unnormalisable_identifier_is_loaded_and_counted() -> None:
    flt = SuppressionFilter(COLUMNS, [V1], suppressed(tomb(V1, "email", EMAIL)))
    rows = [
        {"id": 1, "email": "no-at-sign"},
        {"id": 2, "email": None, "phone": ""},  # missing is not invalid
        {"id": 3},
        {"id": 4, "email": "no-at-sign", "alt_email": EMAIL},  # suppressed wins
    ]
    assert ids(flt.filter(rows)) == [1, 2, 3]
    c = flt.counts
    assert (c.read, c.loaded, c.suppressed, c.invalid_identifier) == (4, 3, 1, 1)


def test_non_string_identifiers_are_matched_as_text() -> None:
    columns = {"id": IdentifierColumn("customer_id", "strip")}
    flt = SuppressionFilter(columns, [V1], suppressed(tomb(V1, "customer_id", "42")))
    assert ids(flt.filter([{"id": 42}, {"id": 0}, {"id": "42 "}])) == [0]


def test_the_filter_streams_and_counts_across_calls() -> None:
    flt = SuppressionFilter(COLUMNS, [V1], suppressed(tomb(V1, "email", EMAIL)))
    pulled: list[int] = []

    def source() -> Iterator[dict[str, Any]]:
        for i in range(1, 4):
            pulled.append(i)
            yield {"id": i, "email": EMAIL if i == 2 else f"p{i}@example.com"}

    out = flt.filter(source())
    assert next(out)["id"] == 1
    assert pulled == [1]  # nothing read ahead
    assert next(out)["id"] == 3
    out.close()
    assert ids(flt.filter([{"id": 9, "email": "x@example.com"}])) == [9]
    assert (flt.counts.read, flt.counts.loaded, flt.counts.suppressed) == (4, 3, 1)


def test_from_list_uses_every_tombstone_in_the_store(store: Store) -> None:
    suppression = SuppressionList(store)
    suppression.add(tomb(V1, "email", EMAIL))
    suppression.add(tomb(V2, "phone", PHONE_E164))
    flt = SuppressionFilter.from_list(suppression, COLUMNS, [V1, V2])
    rows = [{"id": 1, "email": EMAIL}, {"id": 2, "phone": "+44 20 7946 0958"}, {"id": 3}]
    assert ids(flt.filter(rows)) == [3]
    assert flt.tombstones == 2


def test_identifier_columns_come_from_holds_subject(catalog: Catalog) -> None:
    columns = identifier_columns(catalog, catalog.by_name("crm.customers"))
    assert columns == {
        "email": IdentifierColumn("email", "email"),
        "alt_email": IdentifierColumn("email", "email"),
        "phone": IdentifierColumn("phone", "e164", "GB"),
        "id": IdentifierColumn("customer_id", "strip"),
    }


@pytest.mark.parametrize(
    "value",
    [" A@B.com ", "a@b", "@b", "a@", "a@@b", "", "   ", "ÄÖ@Ü.de", "a b@c"],
)
def test_the_filter_normalises_exactly_as_tombstones_are_made(value: str) -> None:
    """A row matches iff normalise() succeeds and gives the tombstoned value."""
    try:
        expected: str | None = normalise("email", value)
    except SubjectError:
        expected = None
    t = tomb(V1, "email", expected if expected else "x@y")
    flt = SuppressionFilter({"e": IdentifierColumn("email", "email")}, [V1], suppressed(t))
    assert ids(flt.filter([{"id": 1, "e": value}])) == ([] if expected else [1])


def _email(value: str) -> str:
    return normalise("email", value)


def test_bytes_name_nobody_as_they_do_for_locate_and_verify() -> None:
    # str(b"+44...") is "b'+44...'", in which the phone matcher still finds the number.
    tombstone = tomb(V1, "phone", normalise("e164", "+44 20 7946 0958"))
    flt = SuppressionFilter(COLUMNS, [V1], suppressed(tombstone))
    rows = [{"id": 1, "phone": b"+442079460958"}, {"id": 2, "phone": bytearray(b"02079460958")}]
    assert ids(flt.filter(rows)) == [1, 2]
    assert (flt.counts.suppressed, flt.counts.invalid_identifier) == (0, 2)


# -- The verdict cache -----------------------------------------------------------------------


def _stream(n: int, seed: int) -> list[dict[str, Any]]:
    """Rows as CRM exports hold them: the same people in many shapes, repeated (households,
    re-sent rows), with unreadable, empty and missing identifiers among them."""
    rng = random.Random(seed)
    people = [(f"person.{i}@example.com", f"020 7946 {i:04d}") for i in range(40)]
    shapes_email = [str.upper, str.title, lambda e: f"  {e}\t", lambda e: f"Name <{e}>"]
    shapes_phone = [
        lambda p: p, lambda p: "+44 " + p[1:], lambda p: "0044" + p[1:].replace(" ", ""),
        lambda p: p.replace(" ", "-"), lambda p: f"({p[:3]}) {p[4:]}", lambda p: f"{p} (home)",
    ]  # fmt: skip
    rows: list[dict[str, Any]] = []
    for i in range(n):
        email, phone = rng.choice(people)
        row: dict[str, Any] = {
            "id": i,
            "email": rng.choice(shapes_email)(email),
            "phone": rng.choice(shapes_phone)(phone),
        }
        roll = rng.random()
        if roll < 0.05:
            row["email"] = "no-at-sign"
        elif roll < 0.1:
            row["phone"] = rng.choice([None, "", b"02079460001"])
        elif roll < 0.15:
            del row["email"]
        rows.append(row)
    return rows


def _expected_kept(rows: list[dict[str, Any]], stones: dict[int, set[str]]) -> list[int]:
    """The decision without the filter: every identifier normalised, then hashed per version."""
    peppers = {1: V1, 2: V2}
    kept = []
    for row in rows:
        hit = False
        for column, spec in COLUMNS.items():
            value = row.get(column)
            if not isinstance(value, str) or not value:
                continue
            try:
                normalised = normalise(spec.normalise, value, default_region=spec.default_region)
            except SubjectError:
                continue
            hit = hit or any(
                subject_hash(peppers[v], spec.id_type, normalised) in hashes
                for v, hashes in stones.items()
            )
        if not hit:
            kept.append(row["id"])
    return kept


@pytest.mark.parametrize("cache_size", [0, 2, 7, 64, 100_000])
def test_the_cache_never_changes_what_is_dropped(cache_size: int) -> None:
    stones = suppressed(
        tomb(V1, "email", "person.3@example.com"),
        tomb(V2, "email", "person.5@example.com"),
        tomb(V1, "phone", "+442079460007"),
        tomb(V2, "phone", "+442079460011"),
    )
    rows = _stream(3000, seed=cache_size)
    flt = SuppressionFilter(COLUMNS, [V1, V2], stones, cache_size=cache_size)
    assert ids(flt.filter(rows)) == _expected_kept(rows, stones)
    uncached = SuppressionFilter(COLUMNS, [V1, V2], stones, cache_size=0)
    assert ids(uncached.filter(rows)) == _expected_kept(rows, stones)
    assert flt.counts == uncached.counts
    cache = flt.cache()
    assert cache.size <= 2 * cache_size  # two identifier types, each bounded
    if cache_size > 1000:
        assert cache.hit_share > 0.5  # 40 people in a few shapes: mostly repeats


def test_the_cache_is_bounded_and_holds_counts_only() -> None:
    flt = SuppressionFilter(COLUMNS, [V1], suppressed(tomb(V1, "email", EMAIL)), cache_size=10)
    rows = [{"id": i, "email": f"user.{i}@example.com"} for i in range(1000)]
    rows.append({"id": 1000, "email": EMAIL})
    assert len(ids(flt.filter(rows))) == 1000
    cache = flt.cache()
    assert cache.size <= 10
    assert (cache.hits, cache.misses, cache.max_size) == (0, 10, 10)
    assert cache.stopped  # ten values, none seen again: the cache stopped
    assert "example.com" not in repr(cache)
    flt.clear_cache()
    assert flt.cache().size == 0


def test_a_value_seen_again_is_answered_from_the_cache() -> None:
    flt = SuppressionFilter(COLUMNS, [V1], suppressed(tomb(V1, "email", EMAIL)))
    rows = [{"id": i, "email": EMAIL if i % 2 else "kept@example.com"} for i in range(10)]
    assert ids(flt.filter(rows)) == [0, 2, 4, 6, 8]
    assert (flt.cache().hits, flt.cache().misses) == (8, 2)
    assert flt.cache().hit_share == 0.8


def test_a_stream_of_distinct_values_stops_the_cache_and_drops_the_same_rows() -> None:
    stones = suppressed(tomb(V1, "email", "user.20000@example.com"))
    rows = [{"id": i, "email": f"user.{i}@example.com"} for i in range(30_000)]
    flt = SuppressionFilter(COLUMNS, [V1], stones, cache_size=1000)
    assert len(ids(flt.filter(rows))) == len(rows) - 1
    cache = flt.cache()
    assert cache.stopped and cache.size == 0  # and the values it held are gone
    assert (cache.hits, cache.misses) == (0, 1000)
    flt.clear_cache()  # a new stream gets its own trial
    assert not flt.cache().stopped


def test_a_stream_that_repeats_keeps_its_cache() -> None:
    rows = [{"id": i, "email": f"user.{i % 400}@example.com"} for i in range(30_000)]
    flt = SuppressionFilter(COLUMNS, [V1], suppressed(tomb(V1, "email", EMAIL)), cache_size=1000)
    assert len(ids(flt.filter(rows))) == len(rows)
    assert not flt.cache().stopped and flt.cache().hit_share > 0.9


def test_a_long_value_is_not_cached_and_a_lone_surrogate_is_invalid_not_a_crash() -> None:
    flt = SuppressionFilter(COLUMNS, [V1], suppressed(tomb(V1, "email", EMAIL)))
    rows = [
        {"id": 0, "email": "x" * 5000 + "@example.com"},
        {"id": 1, "email": "alice\ud800@example.com"},
        {"id": 2, "email": EMAIL},
    ]
    assert ids(flt.filter(rows[1:])) == [1]
    assert flt.counts.invalid_identifier == 1  # the surrogate: loaded, counted, never a crash
    assert ids(flt.filter(rows[:1])) == [0]
    assert flt.cache().size == 2  # the surrogate and the tombstoned address; not the long one


def test_a_cache_size_of_one_or_below_zero_is_refused() -> None:
    for bad in (-1, 1):
        with pytest.raises(SuppressionError, match="cache_size"):
            SuppressionFilter(COLUMNS, [V1], {}, cache_size=bad)


# -- Which tombstone a row hashes to (restore replay, erasure.replay) ------------------------


def test_matches_names_the_tombstone_of_exactly_the_rows_the_filter_drops() -> None:
    stones = [
        tomb(V1, "email", "person.3@example.com"),
        tomb(V2, "email", "person.5@example.com"),
        tomb(V1, "phone", "+442079460007"),
        tomb(V2, "phone", "+442079460011"),
    ]
    rows = [*_stream(3000, seed=11), {"id": -1, "email": 42}, {"id": -2, "phone": b"\x00"}]
    flt = SuppressionFilter(COLUMNS, [V1, V2], suppressed(*stones))
    kept = set(ids(flt.filter(rows)))
    keys = {(t.pepper_version, t.subject_hash): t for t in stones}
    for row in rows:
        hits = flt.matches(row)
        assert bool(hits) == (row["id"] not in kept), row["id"]
        for column, hit in hits.items():
            stone = keys[(hit.pepper_version, hit.subject_hash)]
            assert hit.id_type == stone.identifier_type == COLUMNS[column].id_type
    assert flt.counts.read == len(rows)  # matches() counts nothing


def test_tombstones_are_looked_up_by_version_and_hash(store: Store) -> None:
    old, new = tomb(V1, "email", EMAIL), tomb(V2, "phone", PHONE_E164)
    suppression = SuppressionList(store)
    for stone in (old, new):
        suppression.add(stone.model_copy(update={"request_ref": "REQ-1"}))
    found = suppression.tombstones_with(
        [(2, new.subject_hash), (1, old.subject_hash), (2, old.subject_hash)]
    )
    assert [(t.pepper_version, t.subject_hash, t.request_ref) for t in found] == [
        (1, old.subject_hash, "REQ-1"),
        (2, new.subject_hash, "REQ-1"),
    ]
    assert suppression.tombstones_with([]) == []
