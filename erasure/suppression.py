"""Tombstones and the suppression list that keeps erased subjects out of future loads.

A tombstone is the keyed hash `HMAC-SHA256(pepper_v, type:normalised)` with its pepper
version; the list never holds a raw identifier. Ingest runs every row through
`SuppressionFilter`, which hashes each identifier column under every pepper version that has
tombstones, so tombstones written before a pepper rotation keep suppressing after it. A value
seen again (CRM exports repeat them) takes the verdict it had: a bounded cache that only the
filter object holds, never logged or written.

Invalid identifiers: a value that cannot be normalised (an "email" without one "@", bytes)
cannot equal the normalised value a tombstone was made from, so it cannot match one; such a
row is loaded and counted in `invalid_identifier` for the data owner to fix at the source.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from cryptography.hazmat.primitives import hashes, hmac
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from erasure.catalog import Catalog, DatasetSpec
from erasure.errors import SubjectError, SuppressionError
from erasure.model import Identity
from erasure.pseudonym import BINARY_TYPES, Normaliser, Pepper, normaliser, subject_hash
from erasure.store import Store, store_errors
from erasure.store.dialect import conflict_insert
from erasure.store.schema import HASH_LENGTH, suppression_list

log = logging.getLogger(__name__)

HASH_PATTERN = rf"^[0-9a-f]{{{HASH_LENGTH}}}$"
_KEYS_PER_QUERY = 500  # (version, hash) pairs per lookup: two bound values each


class Tombstone(BaseModel):
    """One erased subject as the suppression list holds it: a keyed hash, never the value."""

    model_config = ConfigDict(frozen=True)

    subject_hash: str = Field(pattern=HASH_PATTERN)
    identifier_type: str = Field(min_length=1, max_length=64)
    pepper_version: int = Field(ge=0)
    created_at: AwareDatetime = Field(default_factory=lambda: datetime.now(UTC))
    request_ref: str | None = Field(default=None, max_length=128)

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return value.astimezone(UTC)

    @classmethod
    def for_subject(
        cls, pepper: Pepper, id_type: str, normalised: str, *, request_ref: str | None = None
    ) -> Tombstone:
        """The tombstone for an already normalised identifier under `pepper`."""
        return cls(
            subject_hash=subject_hash(pepper, id_type, normalised),
            identifier_type=id_type,
            pepper_version=pepper.version,
            request_ref=request_ref,
        )


class SuppressionList:
    """The tombstones in the erasure store."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._engine = store.engine

    def add(self, tombstone: Tombstone) -> bool:
        """Insert a tombstone; True if new, False if it was already there (first one kept)."""
        stmt = (
            conflict_insert(suppression_list, self._store.dialect)
            .values(**tombstone.model_dump())
            .on_conflict_do_nothing(index_elements=["subject_hash", "pepper_version"])
            .returning(suppression_list.c.subject_hash)  # no row back when it was there
        )
        with self._access("write"), self._engine.begin() as conn:
            inserted = conn.execute(stmt).first() is not None
        log.info(
            "tombstone %s: type=%s pepper_version=%d hash=%s",
            "added" if inserted else "already present",
            tombstone.identifier_type,
            tombstone.pepper_version,
            tombstone.subject_hash,
        )
        return inserted

    def contains(self, subject_hash: str, pepper_version: int) -> bool:
        """Whether this hash under this pepper version is tombstoned."""
        c = suppression_list.c
        stmt = sa.select(sa.literal(1)).where(
            c.subject_hash == subject_hash, c.pepper_version == pepper_version
        )
        with self._access("read"), self._engine.connect() as conn:
            return conn.execute(stmt).first() is not None

    def check(
        self, id_type: str, value: str, peppers: Sequence[Pepper], normaliser: Normaliser
    ) -> list[Tombstone]:
        """Tombstones of the subject `id_type=value` under any of `peppers` (empty: none)."""
        return self.tombstones_of([Identity(id_type, normaliser(value))], peppers)

    def tombstones_of(
        self, identities: Iterable[Identity], peppers: Sequence[Pepper]
    ) -> list[Tombstone]:
        """Tombstones of any of the (normalised) `identities` under any of `peppers`, the
        oldest first (empty: none)."""
        if not peppers:
            raise SuppressionError("no pepper versions given: cannot hash the identifier to check")
        c = suppression_list.c
        wanted = [
            sa.and_(
                c.subject_hash == subject_hash(p, identity.type, identity.value),
                c.pepper_version == p.version,
            )
            for identity in identities
            for p in peppers
        ]
        if not wanted:
            return []
        stmt = (
            sa.select(suppression_list)
            .where(sa.or_(*wanted))
            .order_by(c.created_at, c.pepper_version, c.subject_hash)
        )
        with self._access("read"), self._engine.connect() as conn:
            rows = conn.execute(stmt).mappings().all()
        return [Tombstone.model_validate(dict(row)) for row in rows]

    def tombstones_with(self, keys: Iterable[tuple[int, str]]) -> list[Tombstone]:
        """The tombstones with these (pepper version, hash) keys, the oldest first (a key not
        on the list is left out)."""
        c = suppression_list.c
        wanted = sorted(set(keys))
        rows: list[Any] = []
        with self._access("read"), self._engine.connect() as conn:
            for start in range(0, len(wanted), _KEYS_PER_QUERY):
                chunk = wanted[start : start + _KEYS_PER_QUERY]
                stmt = sa.select(suppression_list).where(
                    sa.tuple_(c.pepper_version, c.subject_hash).in_(chunk)
                )
                rows += conn.execute(stmt).mappings().all()
        stones = [Tombstone.model_validate(dict(row)) for row in rows]
        return sorted(stones, key=lambda t: (t.created_at, t.pepper_version, t.subject_hash))

    def hashes_for(self, pepper_version: int) -> set[str]:
        """Every tombstoned hash under `pepper_version`."""
        c = suppression_list.c
        stmt = sa.select(c.subject_hash).where(c.pepper_version == pepper_version)
        with self._access("read"), self._engine.connect() as conn:
            return set(conn.execute(stmt).scalars())

    def hashes_by_version(self) -> dict[int, set[str]]:
        """Every tombstoned hash, grouped by pepper version (what the ingest filter needs)."""
        c = suppression_list.c
        out: dict[int, set[str]] = {}
        with self._access("read"), self._engine.connect() as conn:
            for version, digest in conn.execute(sa.select(c.pepper_version, c.subject_hash)):
                out.setdefault(version, set()).add(digest)
        return out

    def count(self) -> int:
        """How many tombstones (hash, pepper version) the list holds."""
        stmt = sa.select(sa.func.count()).select_from(suppression_list)
        with self._access("read"), self._engine.connect() as conn:
            return int(conn.execute(stmt).scalar_one())

    def _access(self, verb: str) -> AbstractContextManager[None]:
        return store_errors(self._store, f"{verb} the suppression list", SuppressionError)


def check_subject(
    store: Store, catalog: Catalog, id_type: str, value: str, peppers: Sequence[Pepper]
) -> list[Tombstone]:
    """Tombstones for `id_type=value`, normalised as the catalog says (CLI `suppression check`)."""
    spec = catalog.identifiers.get(id_type)
    if spec is None:
        # Not echoed: a mistyped command line may carry the identifier where the type belongs.
        raise SubjectError(
            f"unknown identifier type; allowed: {', '.join(sorted(catalog.identifiers))}"
        )
    return SuppressionList(store).check(
        id_type, value, peppers, normaliser(spec.normalise, spec.default_region)
    )


@dataclass(frozen=True, slots=True)
class IdentifierColumn:
    """A column of an ingested row that holds an identifier of `id_type`."""

    id_type: str
    normalise: str  # one of pseudonym.NORMALISERS
    default_region: str | None = None  # for e164


def identifier_columns(catalog: Catalog, dataset: DatasetSpec) -> dict[str, IdentifierColumn]:
    """Column -> identifier for every `holds_subject` column of `dataset` in the catalog."""
    out: dict[str, IdentifierColumn] = {}
    for id_type, columns in dataset.holds_subject.items():
        spec = catalog.identifiers[id_type]
        for column in columns:
            out[column] = IdentifierColumn(id_type, spec.normalise, spec.default_region)
    return out


@dataclass(slots=True)
class FilterCounts:
    """What the filter saw; final once its iterator is exhausted or closed."""

    read: int = 0
    loaded: int = 0
    suppressed: int = 0
    invalid_identifier: int = 0  # loaded rows with an identifier that could not be normalised
    suppressed_by_type: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TombstoneHit:
    """The tombstone an identifier value hashes to: its type, pepper version and hash (the
    keyed hash the suppression list holds, never the value)."""

    id_type: str
    pepper_version: int
    subject_hash: str


class _Invalid:
    """What a check says of a value that cannot be normalised (it names nobody)."""


_INVALID = _Invalid()

_MISS = object()

# Identifier value -> the tombstone it hashes to, None (not tombstoned) or _INVALID. A
# verdict depends on the value alone, so one is reused for a repeated value.
_Verdict = Callable[[str], "TombstoneHit | _Invalid | None"]
# The verdict and its cache: two generations of value -> verdict (see `filter`).
_CachedVerdict = tuple[_Verdict, dict[str, object], dict[str, object]]

# Longer values are never an identifier any normaliser accepts (an email is at most 254
# characters, a phone number far less): not cached, so the cache's memory is bounded too.
_CACHED_LENGTH = 320

DEFAULT_CACHE_SIZE = 65_536
"""Verdicts a filter keeps per identifier type by default: CRM exports repeat values
(households, re-sent rows). Bounded (the values not seen for longest dropped first, half the
cache at a time), held by the filter object only: the raw values it is keyed by go when the
filter goes or `clear_cache` is called, and are never logged or written."""


@dataclass(frozen=True, slots=True)
class VerdictCache:
    """How a filter's verdict caches served it: counts only, never a value."""

    hits: int
    misses: int
    size: int  # verdicts held now, over all identifier types
    max_size: int  # per identifier type (and normaliser); 0: no cache
    stopped: bool = False  # the values did not repeat: the filter stopped caching

    @property
    def hit_share(self) -> float:
        """The share of non-empty identifier values answered from the cache."""
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else 0.0


class SuppressionFilter:
    """Drops rows whose identifiers match a tombstone under any pepper version, and counts."""

    def __init__(
        self,
        identifier_columns: Mapping[str, IdentifierColumn],
        peppers: Sequence[Pepper],
        suppressed: Mapping[int, Collection[str]],
        *,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        if not identifier_columns:
            raise SuppressionError(
                "no identifier columns given: the filter could not recognise any subject"
            )
        if not peppers:
            raise SuppressionError("no pepper versions given: cannot hash identifiers to check")
        if cache_size < 0 or cache_size == 1:
            raise SuppressionError(
                f"cache_size must be 0 (no cache) or at least 2, not {cache_size}"
            )
        secrets = _secrets_by_version(peppers)
        missing = sorted(v for v, hashes in suppressed.items() if hashes and v not in secrets)
        if missing:
            # Fail closed: without the pepper these tombstones could never match.
            raise SuppressionError(
                f"tombstones exist under pepper version(s) {missing} but no pepper was given "
                "for them; fetch every pepper version, not only the current one"
            )
        digests = {v: _digests(v, hashes) for v, hashes in sorted(suppressed.items()) if hashes}
        self.pepper_versions = sorted(secrets)
        self.tombstones = sum(len(d) for d in digests.values())
        self.cache_size = cache_size
        # Columns of one identifier type read the same way share a verdict and its cache.
        verdicts: dict[IdentifierColumn, _CachedVerdict] = {}
        for spec in identifier_columns.values():
            if spec not in verdicts:
                verdict = _verdict(
                    spec.id_type,
                    normaliser(spec.normalise, spec.default_region),
                    # A version without tombstones cannot suppress: it is not hashed at all.
                    tuple(
                        (v, _hmac_template(secrets[v], spec.id_type), d) for v, d in digests.items()
                    ),
                )
                verdicts[spec] = (verdict, {}, {})
        self._caches = tuple((recent, older) for _, recent, older in verdicts.values())
        self._checks = tuple(
            (column, *verdicts[spec]) for column, spec in identifier_columns.items()
        )
        self._hits = self._misses = 0
        self._cache_idle = False  # set once a stream shows its values do not repeat
        self.counts = FilterCounts()

    @classmethod
    def from_list(
        cls,
        suppression: SuppressionList,
        identifier_columns: Mapping[str, IdentifierColumn],
        peppers: Sequence[Pepper],
        *,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> SuppressionFilter:
        """A filter over every tombstone currently in `suppression`."""
        return cls(
            identifier_columns, peppers, suppression.hashes_by_version(), cache_size=cache_size
        )

    def cache(self) -> VerdictCache:
        """Hits and misses of the verdict caches since the last `clear_cache`."""
        size = sum(len(recent) + len(older) for recent, older in self._caches)
        return VerdictCache(self._hits, self._misses, size, self.cache_size, self._cache_idle)

    def _stop_caching(self) -> None:
        self._cache_idle = True
        for recent, older in self._caches:
            recent.clear()
            older.clear()

    def clear_cache(self) -> None:
        """Drop every cached verdict (and with them the raw values they were looked up by)."""
        for recent, older in self._caches:
            recent.clear()
            older.clear()
        self._hits = self._misses = 0
        self._cache_idle = False

    def matches(self, row: Mapping[str, Any]) -> dict[str, TombstoneHit]:
        """Column -> the tombstone its value hashes to, for each identifier column of `row`
        that names an erased subject: empty exactly when `filter` would load the row. Not
        counted and not cached (restore replay asks it of the rows `filter` dropped)."""
        found: dict[str, TombstoneHit] = {}
        for column, verdict, _recent, _older in self._checks:
            value = _identifier_text(row.get(column))
            if not isinstance(value, str):  # names nobody, or invalid
                continue
            hit = verdict(value)
            if isinstance(hit, TombstoneHit):
                found[column] = hit
        return found

    def filter(self, rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Yield the rows that may be loaded; counts accumulate on `self.counts`."""
        counts = self.counts
        checks = self._checks
        # Two generations of at most half the size each: a verdict used since the recent
        # one began is kept, the older generation is dropped whole. Cheaper per miss than an
        # exact LRU list, and as bounded.
        generation = 0 if self._cache_idle else self.cache_size // 2
        read = loaded = suppressed = invalid = hits = misses = 0
        try:
            for row in rows:
                read += 1
                hit: TombstoneHit | None = None
                bad = False
                for column, verdict, recent, older in checks:
                    value = row.get(column)
                    if value.__class__ is not str:
                        if value is None:
                            continue
                        if isinstance(value, BINARY_TYPES):
                            # Bytes name nobody, as everywhere else: str() would make an
                            # identifier out of "b'...'" (a phone inside it still parses).
                            bad = True
                            continue
                        value = str(value)  # JSON numbers, e.g. a numeric customer id
                    elif not value:
                        continue
                    if generation and len(value) <= _CACHED_LENGTH:
                        found = recent.get(value, _MISS)
                        if found is _MISS:
                            found = older.get(value, _MISS)
                            if found is not _MISS:
                                hits += 1
                            else:
                                found = verdict(value)
                                misses += 1
                            if misses == self.cache_size and hits * 10 < misses:
                                # A cache's worth of values hit it less than one time in
                                # ten (an export of distinct people): it only costs here,
                                # about a fifth of the filter's time. Stop using it.
                                generation = 0
                                self._stop_caching()
                            else:
                                if len(recent) >= generation:
                                    older.clear()
                                    older.update(recent)
                                    recent.clear()
                                recent[value] = found
                        else:
                            hits += 1
                    else:
                        found = verdict(value)
                    if found is None:
                        continue
                    if found is _INVALID:
                        bad = True
                        continue
                    hit = found  # type: ignore[assignment]
                    break
                if hit is not None:
                    suppressed += 1
                    by_type = counts.suppressed_by_type
                    by_type[hit.id_type] = by_type.get(hit.id_type, 0) + 1
                    continue
                if bad:
                    invalid += 1
                loaded += 1
                yield row
        finally:
            self._hits += hits
            self._misses += misses
            counts.read += read
            counts.loaded += loaded
            counts.suppressed += suppressed
            counts.invalid_identifier += invalid


def _verdict(
    id_type: str,
    normalise: Normaliser,
    keyed: tuple[tuple[int, hmac.HMAC, frozenset[bytes]], ...],
) -> _Verdict:
    """The check of one identifier value: normalised as tombstones are made, then hashed under
    each pepper version that has tombstones (HMAC already fed `type:`) until one matches."""

    def verdict(value: str) -> TombstoneHit | _Invalid | None:
        try:
            message = normalise(value).encode()
        except (SubjectError, UnicodeEncodeError):  # a lone surrogate (JSON "\ud800") names nobody
            return _INVALID
        for version, template, tombstoned in keyed:
            mac = template.copy()
            mac.update(message)
            digest = mac.finalize()
            if digest in tombstoned:
                return TombstoneHit(id_type, version, digest.hex())
        return None

    return verdict


def _identifier_text(value: Any) -> str | _Invalid | None:
    """A stored value as `SuppressionFilter.filter` reads it (inlined there, for speed): None
    and "" name nobody, bytes are invalid, other non-text values are read as text."""
    if value is None:
        return None
    if value.__class__ is not str:
        if isinstance(value, BINARY_TYPES):
            return _INVALID
        return str(value)
    return value or None


def _secrets_by_version(peppers: Sequence[Pepper]) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for pepper in peppers:
        if out.get(pepper.version, pepper.secret) != pepper.secret:
            raise SuppressionError(f"two different peppers claim version {pepper.version}")
        out[pepper.version] = pepper.secret
    return out


def _hmac_template(secret: bytes, id_type: str) -> hmac.HMAC:
    """HMAC(secret) already fed `type:`; a copy plus the value gives `subject_hash`."""
    # Keyed once and copied per value: skips re-deriving the padded key for every row.
    template = hmac.HMAC(secret, hashes.SHA256())
    template.update(f"{id_type}:".encode())
    return template


def _digests(version: int, hex_hashes: Collection[str]) -> frozenset[bytes]:
    try:
        return frozenset(bytes.fromhex(h) for h in hex_hashes)
    except ValueError:
        raise SuppressionError(
            f"a tombstone under pepper version {version} is not a hex hash; the list is corrupt"
        ) from None
