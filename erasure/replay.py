"""Restore replay: the rows of erased subjects that a restored backup brought back, erased again.

A backup taken before erasures brings back, once restored, every subject erased since, and no
request is open to erase them again. The suppression list knows each of them by keyed hash
only, and the CRM ingest's `SuppressionFilter` already recognises their rows: it hashes each
identifier column under every pepper version that has tombstones. A replay runs the restored
table through that same filter, and erases again a row the filter drops only where a request
signed complete erased this table for one of the row's tombstones
(`erasure.replay_attribution`): a tombstone of a request still in flight, or of one that did
not erase this table, or a table a DPO ruling kept, erases nothing, and the record says how
many rows stayed and why. The rows go by primary key (by identifier value, compared exactly,
on a table without one) in one transaction (REPEATABLE READ on Postgres), the delete's own
row count held to the rows read; then the space is reclaimed as an erasure's is. A second
read (a fresh connection, every row hashed again, the table counted) verifies that none
remain and that everybody else's rows are all still there, and a signed, hash-chained
`replayed` record cites every completed request that erased them, their completion records,
the rows erased for each, the pepper versions, the verification, and how many rows of the
datasets this table points at are now pointed at by no row (the operator erases those).

The record's `request_ref` is the replay's own reference, `REPLAY-<UTC time>-<6 hex>` (a
prefix no request may take): a completed request takes no further records, a replay may cite
many requests or none, and the erased requests' own chains stay as they were. Its
`subject_hash` is `NO_SUBJECT` (64 zeros): a replay is about no one subject; the subjects are
the cited tombstones' hashes, which the records already hold.

One replay of a dataset runs at a time (`ReplayLog.hold`). Resumable: the evidence is logged
(`erasure.registry.replays`) before the delete commits, as `erase_rows` logs through
`before_commit`; a replay of the same dataset that finds that entry open resumes it, so a
crash after the commit still ends with the record (and the ledger takes one `replayed` record
per reference). Logs, errors and records carry counts, column and table names, keyed hashes
and references, never a value of a row.
"""

from __future__ import annotations

import logging
import secrets
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.engine import Connection

from erasure.actions.reclaim import VacuumLimits, reclaim_after_delete
from erasure.actions.transaction import transaction
from erasure.audit.records import CompletionRecord, RecordKind, RecordLedger
from erasure.catalog import Catalog, DatasetKind, DatasetSpec, shown_name
from erasure.errors import (
    ErasureError,
    SubjectError,
    WarehouseError,
    describe_failure,
    describe_invalid,
)
from erasure.matching import _require_exact_equality, exact_key, require_exact_dialect
from erasure.model import REPLAY_REF_PREFIX, DatasetRef
from erasure.pseudonym import BINARY_TYPES, Pepper, normaliser, subject_hash
from erasure.registry.replays import ReplayEntry, ReplayLog, ReplayStatus
from erasure.registry.vacuums import PendingVacuums
from erasure.replay_attribution import (
    Attribution,
    CitedCompletion,
    TombstoneKey,
    Verdict,
    attribute,
)
from erasure.replay_record import (
    VERIFY_METHOD,
    Attempt,
    CitedRequest,
    CitedTombstone,
    HeldBack,
    ReferenceLeft,
    ReplayBody,
    ReplayVerification,
    render_replay,
    replay_lines,
)
from erasure.replay_references import (
    VALUES_PER_STATEMENT,
    chunked,
    referenced_tables,
    references_left,
    references_over,
)
from erasure.store.schema import HASH_LENGTH
from erasure.suppression import IdentifierColumn, SuppressionFilter, SuppressionList
from erasure.warehouse import Warehouse, count_rows, statement_text

if TYPE_CHECKING:
    from erasure.services import Services

log = logging.getLogger(__name__)

__all__ = [  # the record's models and rendering live in erasure.replay_record
    "NO_SUBJECT",
    "REPLAY_REF_PREFIX",
    "VERIFY_METHOD",
    "Attempt",
    "CitedCompletion",
    "CitedRequest",
    "CitedTombstone",
    "HeldBack",
    "ReferenceLeft",
    "ReplayBody",
    "ReplayConf",
    "ReplayFailed",
    "ReplayRefused",
    "ReplayVerification",
    "Replayed",
    "dataset_named",
    "render_replay",
    "replay",
    "replay_lines",
    "replay_restore",
    "replayable",
    "restorable",
]

NO_SUBJECT = "0" * HASH_LENGTH  # the record's subject_hash: a replay is about no one subject
SCAN_BATCH = 1000  # rows read and run through the filter at a time
# What a foreign key's ON DELETE does to the rows that point at a deleted one, by its
# Postgres code; NO ACTION and RESTRICT refuse the delete instead, which rolls it back.
_CASCADING = {"c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}
_SERIALIZATION_FAILURES = ("40001", "40P01")  # serialization failure, deadlock


class ReplayRefused(ErasureError):
    """The dataset cannot be replayed: the message says why and what to do instead."""


class ReplayFailed(ErasureError):
    """The replay's delete was refused or its verification failed; rerunning it resumes."""


class ReplayConf(BaseModel):
    """What the operator's DAG run takes (its conf): the restored table's catalog name, and
    its namespace where the name is in several. Nothing else: a conf names no person."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    dataset: str = Field(min_length=1, max_length=767)
    namespace: str | None = Field(default=None, min_length=1, max_length=255)

    @classmethod
    def parse(cls, conf: Mapping[str, Any] | None) -> ReplayConf:
        """The conf's dataset and namespace; ReplayRefused (the keys counted, never named or
        quoted: either may be a person's identifier) for anything else."""
        given = dict(conf or {})
        unknown = sum(key not in cls.model_fields for key in given)
        if unknown:
            raise ReplayRefused(
                f"the run's conf holds {unknown} key(s) besides dataset and namespace: a replay "
                "takes nothing else, and nothing was replayed. Trigger it again with only "
                '{"dataset": "<schema.table>"} (and "namespace" if the name is ambiguous)'
            )
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            raise ReplayRefused(
                f"the run's conf is not a replay's ({describe_invalid(exc, locations=True)}); "
                "nothing was replayed"
            ) from None


@dataclass(frozen=True)
class Replayed:
    """A replay on record: its signed record and the body it holds."""

    record: CompletionRecord
    body: ReplayBody
    resumed: bool  # an earlier run of it had erased (or recorded) before this one


@dataclass(frozen=True)
class Restorable:
    """A dataset a replay can erase in: its table, identifier columns and primary key."""

    ds: DatasetSpec
    table: sa.Table
    columns: dict[str, IdentifierColumn]
    primary_key: tuple[str, ...]  # empty: none, rows go by their identifier values


# ---------------------------------------------------------------------------------------------
# The procedure


def replay(svc: Services, dataset: DatasetRef) -> Replayed:
    """`replay_restore` with the collaborators of `svc` (the CLI's and the DAG's door)."""
    return replay_restore(
        svc.catalog,
        svc.warehouse,
        dataset,
        suppression=svc.suppression,
        peppers=svc.peppers.all_versions(),
        ledger=svc.ledger,
        replays=ReplayLog(svc.store),
        limits=VacuumLimits(
            lock_timeout_seconds=svc.settings.vacuum_lock_timeout_seconds,
            statement_timeout_seconds=svc.settings.vacuum_statement_timeout_seconds,
        ),
    )


def replay_restore(
    catalog: Catalog,
    warehouse: Warehouse,
    dataset: DatasetRef,
    *,
    suppression: SuppressionList,
    peppers: Sequence[Pepper],
    ledger: RecordLedger,
    replays: ReplayLog,
    limits: VacuumLimits | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Replayed:
    """Erase again the rows of `dataset` that hash to a tombstone a completed request erased
    it for, verify, and sign the `replayed` record; resumes an open replay of the dataset
    (idempotent once recorded). ReplayRefused while another replay of it runs."""
    target = restorable(catalog, warehouse, dataset)
    with replays.hold(target.ds.ref) as held:
        if not held:
            raise ReplayRefused(
                f"another restore replay of {target.ds.ref.qualified} is running (from the "
                "CLI or the DAG): wait for it to end and read its record (`erasure audit "
                "list`); run the replay again only if that one failed"
            )
        return _replay_held(
            catalog, warehouse, target, suppression, peppers, ledger, replays,
            limits or VacuumLimits(), clock,
        )  # fmt: skip


def _replay_held(
    catalog: Catalog,
    warehouse: Warehouse,
    target: Restorable,
    suppression: SuppressionList,
    peppers: Sequence[Pepper],
    ledger: RecordLedger,
    replays: ReplayLog,
    limits: VacuumLimits,
    clock: Callable[[], datetime],
) -> Replayed:
    ds = target.ds
    entry = replays.open_for(ds.ref)
    if entry is not None:
        done = _replayed_on_record(ledger, entry.replay_ref)
        if done is not None:  # the record was appended; closing the log was what failed
            replays.recorded(entry.replay_ref, done.seq)
            if ledger.anchor_history() is not None:
                ledger.anchor_head()  # the append may have failed publishing the head
            return Replayed(done, ReplayBody.model_validate(done.body), resumed=True)
    ref = entry.replay_ref if entry is not None else _new_ref(ledger, clock())
    attribution = attribute(ledger, ds.ref)

    def before_commit(attempt: Attempt) -> None:
        evidence = {"attempts": _merged(entry, attempt)}
        replays.note(ref, ds.ref, ReplayStatus.ERASING, evidence)

    attempt = _erase(
        catalog, warehouse, target, suppression, peppers, attribution, before_commit, clock
    )
    attempts = _merged(entry, attempt)
    replays.note(ref, ds.ref, ReplayStatus.ERASED, {"attempts": attempts})
    reclaimed = _reclaimed(warehouse, ds, attempts, ref, PendingVacuums(replays.store), limits)
    if reclaimed != attempts:
        attempts = reclaimed
        replays.note(ref, ds.ref, ReplayStatus.ERASED, {"attempts": attempts})
    verification = _second_read(warehouse, target, suppression, peppers, attribution, attempt)
    if not verification.passed:
        raise ReplayFailed(
            f"restore replay {ref} of {ds.name}: the second read found "
            f"{verification.tombstoned_rows_remaining} row(s) still to erase, and "
            f"{verification.others_after} row(s) of other people where the delete left "
            f"{verification.others_before}: something wrote to the table meanwhile. Pause "
            "whatever writes to it and run the replay again: it resumes this one"
        )
    body = ReplayBody(
        replay_ref=ref,
        dataset=ds.ref,
        identifier_columns={t: list(c) for t, c in sorted(ds.holds_subject.items())},
        pepper_versions=attempt.pepper_versions,
        tombstones_checked=attempt.tombstones_checked,
        rows_erased=sum(a.rows_deleted for a in attempts),
        cited=_cite(attempts),
        attempts=attempts,
        verification=verification,
        replayed_at=clock(),
        held=attempt.held,  # what stays is what the last pass left
        references_not_replayed=references_over(attempts),
    )
    record = ledger.append(ref, NO_SUBJECT, RecordKind.REPLAYED, body)
    replays.recorded(ref, record.seq)
    log.info(
        "restore replay %s of %s: %d row(s) erased again for %d cited request(s), %d held "
        "back, verified; record seq %d",
        ref, ds.ref.qualified, body.rows_erased, len(body.cited), attempt.rows_held, record.seq,
    )  # fmt: skip
    return Replayed(record, ReplayBody.model_validate(record.body), resumed=entry is not None)


def dataset_named(catalog: Catalog, name: str, namespace: str | None = None) -> DatasetRef:
    """The catalog identity of `name` (in `namespace`, if given); ReplayRefused if unknown."""
    if namespace is None:
        return catalog.by_name(name).ref  # CatalogError, never repeating a malformed name
    found = catalog.dataset(DatasetRef(namespace, name.lower()))
    if found is None:
        raise ReplayRefused(
            f"dataset {shown_name(name, 'with that name')} is not in the catalog under namespace "
            f"{shown_name(namespace, '(not repeated)')}: give a catalogued table"
        )
    return found.ref


def restorable(catalog: Catalog, warehouse: Warehouse, dataset: DatasetRef) -> Restorable:
    """The dataset, its table, identifier columns and key, if a replay can erase rows in it:
    a dialect and columns whose equality is exact, and no foreign key that would delete or
    change other tables' rows with its rows."""
    ds = catalog.dataset(dataset)
    if ds is None:
        raise ReplayRefused(
            f"dataset {shown_name(dataset.qualified, 'with that name')} is not in the catalog: "
            "a replay erases rows of a catalogued table"
        )
    why = why_not_replayable(ds)
    if why is not None:
        raise ReplayRefused(f"dataset {ds.ref.qualified} cannot be replayed: {why}")
    assert ds.connection is not None  # why_not_replayable
    require_exact_dialect(warehouse.url(ds.connection), f"dataset {ds.ref.qualified}")
    table = warehouse.table(ds)
    if table is None:
        raise WarehouseError(
            f"dataset {ds.ref.qualified}: the table does not exist in the warehouse; restore "
            "it first, then replay it"
        )
    from erasure.suppression import identifier_columns

    columns = identifier_columns(catalog, ds)
    missing = sorted(c for c in columns if c not in table.c)
    if missing:
        raise ReplayRefused(
            f"dataset {ds.ref.qualified}: the restored table lacks the identifier column(s) "
            f"{missing} the catalog names (a backup of an older schema?): restore a table with "
            "them, or correct the catalog, then replay it"
        )
    with warehouse.connect(ds) as conn:
        if conn.dialect.name == "postgresql":
            for name in sorted(columns):  # citext, a nondeterministic collation: refused
                _require_exact_equality(conn, table, table.c[name])
        cascading = _cascading_referrers(conn, table)
    if cascading:
        named = ", ".join(f"{name} (ON DELETE {action})" for name, action in cascading)
        raise ReplayRefused(
            f"dataset {ds.ref.qualified} cannot be replayed: a foreign key of {named} points "
            "at it, and deleting its rows would delete or change the rows pointing at them "
            "(other people's among them) without record. Replay the referencing table first "
            "if it holds subjects, and make its foreign key ON DELETE RESTRICT (or NO ACTION) "
            "while the replay runs"
        )
    return Restorable(ds, table, columns, tuple(c.name for c in table.primary_key.columns))


def replayable(ds: DatasetSpec) -> bool:
    """Whether a replay can erase rows in `ds` (the DAG's form offers these tables)."""
    return why_not_replayable(ds) is None


def why_not_replayable(ds: DatasetSpec) -> str | None:
    """Why a replay cannot erase rows in `ds`, and what to do instead; None: it can."""
    if ds.storage == "immutable":
        return (
            "it is immutable storage, whose rows cannot be deleted (its copies are crypto-"
            "shredded or expire): restore into a mutable table and replay that"
        )
    if ds.kind is not DatasetKind.TABLE:
        return (
            f"it is a {ds.kind.value}, not a table: replay the tables it is built from, then "
            "rebuild it (its rebuild reads them without the erased subjects)"
        )
    if not ds.holds_subject:
        return "the catalog names no identifier column of it (holds_subject): nothing to match"
    if ds.connection is None:
        return (
            "it has no warehouse connection to erase in (a system its owner reaches, or a "
            "lakehouse table, whose history a restore does not bring back)"
        )
    if ds.stored_forms:
        return (
            f"column(s) {sorted(ds.stored_forms)} store identifiers in a form of their own; a "
            "replay matches the canonical form tombstones are made from and would miss rows "
            "there: erase them with a request per subject instead"
        )
    return None


def _cascading_referrers(conn: Connection, table: sa.Table) -> list[tuple[str, str]]:
    """(table name, ON DELETE action) of each foreign key pointing at `table` whose action
    deletes or changes the referencing rows (every schema of the database)."""
    if conn.dialect.name == "postgresql":
        rows = conn.execute(
            sa.text(
                "SELECT n.nspname, c.relname, con.confdeltype FROM pg_constraint con"
                " JOIN pg_class c ON c.oid = con.conrelid"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE con.contype = 'f' AND con.confrelid = CAST(:rel AS regclass)"
                " AND con.confdeltype IN ('c', 'n', 'd')"
                " ORDER BY n.nspname, c.relname"
            ),
            {"rel": conn.dialect.identifier_preparer.format_table(table)},
        ).all()
        return sorted({(f"{s}.{t}", _CASCADING[str(a)]) for s, t, a in rows})
    # SQLite: a foreign key points only within its own database (a schema here). The
    # pragma, not the inspector: SQLAlchemy reports ON DELETE of named constraints only.
    preparer = conn.dialect.identifier_preparer
    schema = f"{preparer.quote(table.schema)}." if table.schema else ""
    found = set()
    for name in sa.inspect(conn).get_table_names(schema=table.schema):
        pragma = f"PRAGMA {schema}foreign_key_list({preparer.quote(name)})"
        for fk in conn.exec_driver_sql(pragma).mappings():
            action = str(fk["on_delete"] or "").upper()
            if str(fk["table"]).lower() == table.name.lower() and action in _CASCADING.values():
                found.add((f"{table.schema}.{name}" if table.schema else name, action))
    return sorted(found)


def _new_ref(ledger: RecordLedger, at: datetime) -> str:
    while True:
        ref = f"{REPLAY_REF_PREFIX}{at:%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"
        if not ledger.show(ref):
            return ref


def _replayed_on_record(ledger: RecordLedger, ref: str) -> CompletionRecord | None:
    return next((r for r in ledger.show(ref) if r.kind is RecordKind.REPLAYED), None)


def _merged(entry: ReplayEntry | None, attempt: Attempt) -> list[Attempt]:
    """The attempts that erased, this one included: an entry still `erasing` died before
    or after its commit, unknown which; this attempt finding rows again means before (as
    `erase_rows` reads it), so it stands in for that one. Finding none, the earlier stand."""
    logged = entry.evidence.get("attempts") if entry is not None else None
    earlier = [Attempt.model_validate(a) for a in logged or []]
    if not earlier:
        return [attempt]
    if attempt.rows_deleted == 0:
        return earlier
    if entry is not None and entry.status is ReplayStatus.ERASING:
        earlier = earlier[:-1]
    return [*earlier, attempt]


def _reclaimed(
    warehouse: Warehouse,
    ds: DatasetSpec,
    attempts: list[Attempt],
    ref: str,
    pending: PendingVacuums,
    limits: VacuumLimits,
) -> list[Attempt]:
    """Once the delete committed: VACUUM the table (or list it for the daily pass) as an
    erasure does, on the attempts that deleted and say nothing of it yet (a retry's too)."""
    bare = [a for a in attempts if a.rows_deleted and a.space is None]
    if not bare:
        return attempts
    space = reclaim_after_delete(
        warehouse,
        ds,
        rows_deleted=sum(a.rows_deleted for a in bare),
        request_ref=ref,
        pending=pending,
        limits=limits,
    )
    return [a.model_copy(update={"space": space}) if a in bare else a for a in attempts]


# ---------------------------------------------------------------------------------------------
# Erase: the rows to erase, deleted by primary key (or their identifier values)


class _Hasher:
    """Every tombstone a row's identifiers hash to, under every pepper version with
    tombstones (the filter stops at the first; a subject erased before and after a rotation
    has one under each, and each may name another request)."""

    def __init__(
        self,
        columns: Mapping[str, IdentifierColumn],
        peppers: Sequence[Pepper],
        tombstoned: Mapping[int, Iterable[str]],
    ) -> None:
        hashes = {v: frozenset(h) for v, h in tombstoned.items() if h}
        self._peppers = [p for p in peppers if p.version in hashes]
        self._hashes = hashes
        self._columns = [
            (column, spec.id_type, normaliser(spec.normalise, spec.default_region))
            for column, spec in columns.items()
        ]

    def keys(self, row: Mapping[str, Any]) -> dict[str, set[TombstoneKey]]:
        """Column -> the tombstones its value hashes to (columns naming nobody left out)."""
        found: dict[str, set[TombstoneKey]] = {}
        for column, id_type, normalise in self._columns:
            value = row.get(column)
            if value is None or isinstance(value, BINARY_TYPES):
                continue  # names nobody, as the filter reads it
            text = value if isinstance(value, str) else str(value)
            if not text:
                continue
            try:
                normalised = normalise(text)
            except (SubjectError, UnicodeEncodeError):
                continue
            for pepper in self._peppers:
                digest = subject_hash(pepper, id_type, normalised)
                if digest in self._hashes[pepper.version]:
                    found.setdefault(column, set()).add((pepper.version, digest))
        return found


@dataclass
class _Scan:
    read: int = 0
    erasing: int = 0  # rows to erase
    handles: list[tuple[Any, ...]] = field(default_factory=list)  # their primary keys
    values: dict[str, set[Any]] = field(default_factory=dict)  # column -> values to erase by
    references: dict[str, set[Any]] = field(default_factory=dict)  # column -> values pointed at
    # Per row to erase, the tombstones a completed request erased this table for.
    keysets: Counter[frozenset[TombstoneKey]] = field(default_factory=Counter)
    id_types: dict[TombstoneKey, str] = field(default_factory=dict)
    held: Counter[Verdict] = field(default_factory=Counter)
    held_by: dict[Verdict, set[str]] = field(default_factory=dict)
    unattributed: set[TombstoneKey] = field(default_factory=set)  # keys of no completed request


def _erase(
    catalog: Catalog,
    warehouse: Warehouse,
    target: Restorable,
    suppression: SuppressionList,
    peppers: Sequence[Pepper],
    attribution: Attribution,
    before_commit: Callable[[Attempt], None],
    clock: Callable[[], datetime],
) -> Attempt:
    """Read, match and delete in one transaction; count the table before and after, refuse
    (roll back) unless the delete took exactly the rows read for it."""
    ds, table = target.ds, target.table
    tombstoned = suppression.hashes_by_version()
    flt = SuppressionFilter(target.columns, peppers, tombstoned)
    hasher = _Hasher(target.columns, peppers, tombstoned)
    pointed_at = referenced_tables(catalog, warehouse, ds)  # reflected before the lock
    with warehouse.connect(ds) as conn:
        if conn.dialect.name == "postgresql":
            # One snapshot for read and delete: a row another transaction changes or deletes
            # meanwhile fails the delete (a serialization failure) instead of being counted.
            conn.execution_options(isolation_level="REPEATABLE READ")
        try:
            with transaction(conn):
                rows_before = count_rows(conn, table)
                scan = _scan(conn, target, flt, hasher, attribution)
                deleted, statements, how = _delete(conn, target, scan)
                rows_after = count_rows(conn, table)
                if deleted != scan.erasing or rows_after != rows_before - deleted:
                    raise ReplayFailed(
                        f"dataset {ds.ref.qualified}: the delete took {deleted} row(s) where "
                        f"{scan.erasing} were read to erase ({rows_after} of {rows_before} rows "
                        "after): the table changed while the replay read it, or rows held back "
                        "share an identifier value with rows erased (a table without a primary "
                        "key is erased by value). Rolled back, nothing deleted; pause whatever "
                        "writes to the table and run the replay again, or give it a primary key"
                    )
                references = references_left(conn, table, scan.references, pointed_at)
                attempt = Attempt(
                    erased_at=clock(),
                    rows_before=rows_before,
                    rows_matched=scan.erasing,
                    rows_deleted=deleted,
                    rows_after=rows_after,
                    statements=statements,
                    pepper_versions=sorted(v for v, hashes in tombstoned.items() if hashes),
                    tombstones_checked=flt.tombstones,
                    cited=_attributed(scan, attribution),
                    deleted_by=how,
                    rows_held=sum(scan.held.values()),
                    held=_held(scan, suppression),
                    references=references,
                )
                if deleted:
                    before_commit(attempt)
        except sa.exc.DBAPIError as exc:
            # `from None`: the driver's message may quote a value and would reach logs.
            raise ReplayFailed(_delete_failed(ds, exc)) from None
    return attempt


def _delete_failed(ds: DatasetSpec, exc: sa.exc.DBAPIError) -> str:
    orig = getattr(exc, "orig", None)
    head = (
        f"dataset {ds.ref.qualified}: the replay's delete failed ({describe_failure(exc)}); "
        "rolled back, nothing deleted"
    )
    if getattr(orig, "sqlstate", None) in _SERIALIZATION_FAILURES:
        return (
            f"{head}. Another transaction changed or deleted rows of the table while the replay "
            "read them: pause whatever writes to it and run the replay again"
        )
    return (
        f"{head}. If a foreign key refused it, replay the restored tables that reference this "
        "one first"
    )


def _scan(
    conn: Connection,
    target: Restorable,
    flt: SuppressionFilter,
    hasher: _Hasher,
    attribution: Attribution,
) -> _Scan:
    """Every row through the filter; of the rows it drops, the ones to erase (what to delete
    them by), and the ones that stay and why."""
    table, ds = target.table, target.ds
    pointers = sorted({r.column for r in ds.references if r.column in table.c})
    scan = _Scan()
    for batch in _batches(conn, table, [*target.columns, *target.primary_key, *pointers]):
        scan.read += len(batch)
        kept = {id(row) for row in flt.filter(batch)}
        for row in batch:
            if id(row) in kept:
                continue
            by_column = hasher.keys(row)
            if not by_column:  # filter and hasher decide alike (tests hold them to it)
                raise ReplayFailed("the suppression filter dropped a row no tombstone matches")
            keys = {key for found in by_column.values() for key in found}
            for column, found in by_column.items():
                for key in found:
                    scan.id_types[key] = target.columns[column].id_type
            verdict = attribution.row(keys)
            if verdict is not Verdict.ERASE:
                scan.held[verdict] += 1
                refs = scan.held_by.setdefault(verdict, set())
                for key in keys:
                    if attribution.of(key).verdict is verdict:
                        refs.update(d.request_ref for d in attribution.of(key).requests)
                        if verdict is Verdict.NOT_COMPLETED:
                            scan.unattributed.add(key)
                continue
            scan.erasing += 1
            scan.handles.append(tuple(row[c] for c in target.primary_key))
            erased = {k for k in keys if attribution.of(k).verdict is Verdict.ERASE}
            scan.keysets[frozenset(erased)] += 1
            for column, found in by_column.items():
                if found & erased:
                    scan.values.setdefault(column, set()).add(row[column])
            for column in pointers:
                if row[column] is not None:
                    scan.references.setdefault(column, set()).add(row[column])
    return scan


def _batches(
    conn: Connection, table: sa.Table, columns: Iterable[str]
) -> Iterator[list[dict[str, Any]]]:
    """The given columns of every row, SCAN_BATCH rows at a time."""
    # On the statement: set on the connection it would stream the DELETEs that follow too.
    names = list(dict.fromkeys(columns))
    query = sa.select(*(table.c[c] for c in names)).execution_options(yield_per=SCAN_BATCH)
    result = conn.execute(query)
    for partition in result.mappings().partitions():
        yield [dict(row) for row in partition]


def _delete(
    conn: Connection, target: Restorable, scan: _Scan
) -> tuple[int, list[str], Literal["primary_key", "identifier_values"] | None]:
    """Delete the rows to erase: by primary key, or (a table without one, or a row whose key
    is NULL) by the identifier values they hold, compared exactly (`exact_key`). Returns the
    rows the database says it deleted, the statements' shapes and which way."""
    if not scan.erasing:
        return 0, [], None
    table = target.table
    deleted = 0
    pk = [table.c[name] for name in target.primary_key]
    if pk and all(None not in handle for handle in scan.handles):
        per = max(1, VALUES_PER_STATEMENT // len(pk))
        for start in range(0, len(scan.handles), per):
            chunk = scan.handles[start : start + per]
            deleted += conn.execute(sa.delete(table).where(_key_in(pk, chunk))).rowcount
        shape = sa.delete(table).where(_key_in(pk, [tuple(None for _ in pk)]))
        return deleted, [statement_text(shape, conn.dialect)], "primary_key"
    for column, chunk in _chunks(scan.values):
        predicate = exact_key(conn, table.c[column]).in_(chunk)
        deleted += conn.execute(sa.delete(table).where(predicate)).rowcount
    statements = [
        statement_text(
            sa.delete(table).where(exact_key(conn, table.c[column]).in_([None])), conn.dialect
        )
        for column in sorted(scan.values)
    ]
    return deleted, statements, "identifier_values"


def _key_in(pk: list[sa.Column[Any]], handles: list[tuple[Any, ...]]) -> sa.ColumnElement[bool]:
    if len(pk) == 1:
        return pk[0].in_([h[0] for h in handles])
    return sa.tuple_(*pk).in_(handles)


def _chunks(values: Mapping[str, set[Any]]) -> Iterator[tuple[str, list[Any]]]:
    for column, found in sorted(values.items()):
        for chunk in chunked(found):
            yield column, chunk


def _attributed(scan: _Scan, attribution: Attribution) -> list[CitedRequest]:
    """Rows erased per completed request that erased this table for their tombstones, with
    those tombstones and its completion record."""
    rows: Counter[str] = Counter()
    stones: dict[str, set[CitedTombstone]] = {}
    completions: dict[str, CitedCompletion] = {}
    for keyset, count in scan.keysets.items():
        refs: set[str] = set()
        for key in keyset:
            for done in attribution.of(key).requests:
                refs.add(done.request_ref)
                completions[done.request_ref] = done.completion
                stones.setdefault(done.request_ref, set()).add(
                    CitedTombstone(
                        identifier_type=scan.id_types.get(key, "unknown"),
                        pepper_version=key[0],
                        subject_hash=key[1],
                    )
                )
        for ref in refs:
            rows[ref] += count
    return [
        CitedRequest(
            request_ref=ref,
            rows=rows[ref],
            tombstones=sorted(stones[ref], key=lambda t: (t.pepper_version, t.subject_hash)),
            completion=completions[ref],
            on_record=completions[ref].status,
        )
        for ref in sorted(rows)
    ]


def _held(scan: _Scan, suppression: SuppressionList) -> list[HeldBack]:
    """The rows that stay, by reason, with the requests behind them (references only)."""
    if scan.unattributed:  # the requests that put these tombstones on the list, if any
        for stone in suppression.tombstones_with(scan.unattributed):
            if stone.request_ref is not None:
                scan.held_by.setdefault(Verdict.NOT_COMPLETED, set()).add(stone.request_ref)
    return [
        HeldBack(reason=verdict, rows=scan.held[verdict], requests=sorted(scan.held_by[verdict]))
        for verdict in Verdict
        if scan.held[verdict]
    ]


# ---------------------------------------------------------------------------------------------
# Verify and cite


def _second_read(
    warehouse: Warehouse,
    target: Restorable,
    suppression: SuppressionList,
    peppers: Sequence[Pepper],
    attribution: Attribution,
    attempt: Attempt,
) -> ReplayVerification:
    """A fresh connection and a fresh filter (every tombstone now): no row the replay erases
    may remain, and everybody else's rows (with the rows held back) must all still be there."""
    tombstoned = suppression.hashes_by_version()
    flt = SuppressionFilter(target.columns, peppers, tombstoned)
    hasher = _Hasher(target.columns, peppers, tombstoned)
    remaining = held = 0
    with warehouse.connect(target.ds) as conn:
        total = count_rows(conn, target.table)
        for batch in _batches(conn, target.table, target.columns):
            kept = {id(row) for row in flt.filter(batch)}
            for row in batch:
                if id(row) in kept:
                    continue
                keys = {k for found in hasher.keys(row).values() for k in found}
                if attribution.row(keys) is Verdict.ERASE:
                    remaining += 1
                else:
                    held += 1
    others_before = attempt.rows_before - attempt.rows_matched
    others_after = total - remaining
    return ReplayVerification(
        checked_at=datetime.now(UTC),
        passed=remaining == 0 and others_after == others_before and flt.counts.read == total,
        rows_read=flt.counts.read,
        tombstoned_rows_remaining=remaining,
        others_before=others_before,
        others_after=others_after,
        rows_held=held,
    )


def _cite(attempts: Sequence[Attempt]) -> list[CitedRequest]:
    """The cited requests over every attempt that deleted."""
    rows: Counter[str] = Counter()
    stones: dict[str, set[CitedTombstone]] = {}
    first: dict[str, CitedRequest] = {}
    for attempt in attempts:
        if not attempt.rows_deleted:
            continue
        for cited in attempt.cited:
            rows[cited.request_ref] += cited.rows
            stones.setdefault(cited.request_ref, set()).update(cited.tombstones)
            first.setdefault(cited.request_ref, cited)
    return [
        first[ref].model_copy(
            update={
                "rows": rows[ref],
                "tombstones": sorted(stones[ref], key=lambda t: (t.pepper_version, t.subject_hash)),
            }
        )
        for ref in sorted(rows)
    ]
