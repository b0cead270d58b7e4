"""After a delete: the deleted rows' storage made reusable, or the date by which it will be.

A committed DELETE hides rows from every later query, but the bytes stay where they were.
Postgres keeps each deleted row version (a dead tuple) in the table's heap and its indexes
until VACUUM removes it; SQLite leaves deleted content in the page's free space unless
`secure_delete` overwrites it. So once an erasure's delete has committed, `reclaim` makes the
space reusable:

- Postgres: a plain `VACUUM <table>` on an autocommit connection (VACUUM cannot run in a
  transaction), with a bounded `lock_timeout` and `statement_timeout`. Plain, never FULL:
  VACUUM FULL rewrites the table under an ACCESS EXCLUSIVE lock that stops every reader.
  Plain VACUUM removes the dead tuples from the heap and the indexes and makes their space
  reusable; the bytes may stay in the data files until overwritten, and WAL, replicas and
  base backups keep them until their own retention. It removes only what no open
  transaction may still see, so the transactions older than the delete are looked for first
  (`pg_stat_activity`, prepared transactions): while one is open the delete is not covered.
  The server skips a table its role may not vacuum (owner, database owner or superuser;
  from Postgres 17 also MAINTAIN or pg_maintain) with a mere WARNING, so whether it ran is
  read back from `pg_stat_user_tables.last_vacuum`.
- SQLite: the warehouse turns `secure_delete` on for every connection
  (erasure.warehouse), so the delete itself overwrote the rows with zeros in the database
  file; here that is checked (`PRAGMA <schema>.secure_delete`), and a WAL file is
  checkpointed so the zeroed pages replace the old ones in the file. VACUUM is never run on
  a SQLite warehouse: it rewrites the whole file under an exclusive lock (and needs twice
  its space) only to shrink it, which erases nothing more.
- Any other engine: nothing is done, and the evidence says so.

What could not run now is `scheduled`: listed in the store's `pending_vacuums` with the date
the daily pass (`run_pending`, DAG `erasure_reprove`) will have run it by. That pass, or the
next erasure's VACUUM of the same table, records when it ran; past its date it fails loudly.
Errors and evidence name tables, never a value.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field

from erasure.catalog import Catalog, DatasetSpec
from erasure.errors import ErasureError
from erasure.model import DatasetRef
from erasure.registry.vacuums import PendingVacuum, PendingVacuums
from erasure.warehouse import Warehouse, split_name

SpaceState = Literal["reclaimed", "scheduled", "not_reclaimed", "not_applicable"]

# Why a reclaim did not cover a delete (or, with `dropped`, how it did), as evidence states it.
REASONS: dict[str, str] = {
    "nothing_deleted": "this request deleted no row here",
    "lakehouse": "a lakehouse table: its files go with the snapshots expired (see history)",
    "dropped": "the table was dropped since: its files went with it",
    "not_permitted": "the server skipped VACUUM: the erasure's role may not vacuum the table "
    "(it must own it; Postgres 17+: or hold MAINTAIN on it, or pg_maintain)",
    "lock_timeout": "the table's lock was held (another VACUUM, DDL, or a long lock) past the "
    "lock timeout",
    "statement_timeout": "VACUUM ran past the statement timeout and was cancelled",
    "older_transaction": "a transaction older than the delete was still open, so VACUUM had "
    "to keep the deleted rows' versions",
    "unreachable": "the warehouse could not be reached",
    "failed": "VACUUM failed",
    "checkpoint_busy": "the WAL checkpoint that writes the zeroed pages was blocked by readers",
    "secure_delete_off": "SQLite secure_delete is off: the deleted rows stay in free pages "
    "until overwritten",
    "unmanaged_engine": "this system does not reclaim storage on this engine",
    "not_in_catalog": "the dataset is no longer in the catalog with a connection",
}
# Reasons a later attempt cannot change: no pending entry is kept for them.
_FINAL = frozenset({"secure_delete_off", "unmanaged_engine"})

PASS_INTERVAL = timedelta(days=1)  # the daily pass: erasure_reprove's @daily schedule
_INSUFFICIENT = "<insufficient privilege>"
# Transactions that may still see rows deleted before `deleted_by`: the oldest start of one
# holding a snapshot or a transaction id, and how many sessions this role cannot inspect
# (their start hidden without pg_read_all_stats) or that hold one without a start.
# Autovacuum workers and other VACUUMs do not hold the horizon back; walsenders (standby
# feedback) and replication slots are not looked at: see docs/operator-runbook.md.
_OLDEST_SNAPSHOT = sa.text(
    """
    SELECT
      (SELECT min(xact_start) FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()
          AND backend_type NOT IN ('autovacuum worker', 'walsender')
          AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)) AS oldest_session,
      (SELECT min(prepared) FROM pg_prepared_xacts
        WHERE database = current_database()) AS oldest_prepared,
      (SELECT count(*) FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()
          AND backend_type NOT IN ('autovacuum worker', 'walsender')
          AND (query = :hidden
               OR ((backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
                   AND xact_start IS NULL))) AS unseen
    """
)
_LAST_VACUUM = sa.text(
    "SELECT last_vacuum, n_dead_tup FROM pg_stat_user_tables WHERE relid = to_regclass(:table)"
)


class ReclaimOverdue(ErasureError):
    """A scheduled VACUUM is past the date the record promised it by."""


@dataclass(frozen=True)
class VacuumLimits:
    """How long a VACUUM may wait for its table's lock, and run."""

    lock_timeout_seconds: float = 5.0
    statement_timeout_seconds: float = 300.0


class SpaceEvidence(BaseModel):
    """What became of the deleted rows' storage: in the erasure's evidence (no values)."""

    model_config = ConfigDict(frozen=True)

    state: SpaceState
    engine: str  # the warehouse dialect: postgresql, sqlite, ...
    statement: str | None = Field(default=None, exclude_if=lambda v: v is None)
    at: datetime | None = Field(default=None, exclude_if=lambda v: v is None)  # reclaimed
    by: date | None = Field(default=None, exclude_if=lambda v: v is None)  # scheduled: due
    reason: str | None = Field(default=None, exclude_if=lambda v: v is None)  # see REASONS
    note: str  # one sentence: what is true of the bytes now
    # Postgres: dead tuples the table still had after VACUUM (other writers' and any page
    # another session held pinned), and whether every session could be seen to be newer.
    dead_tuples_left: int | None = Field(default=None, exclude_if=lambda v: v is None)
    snapshots_checked: bool | None = Field(default=None, exclude_if=lambda v: v is None)


@dataclass(frozen=True)
class Reclaimed:
    """One attempt to make a table's deleted rows' space reusable."""

    engine: str
    statement: str | None  # what ran (or would have), the table quoted, no values
    began: datetime  # the warehouse's clock as it began: after the delete committed
    finished: datetime
    ran: bool  # the statement ran to completion (or the table is gone)
    reason: str | None  # why it did not run; "dropped" when there was nothing left to run on
    oldest_snapshot: datetime | None  # the oldest transaction start seen holding a snapshot
    snapshots_checked: bool  # every session of the database could be inspected
    dead_tuples_left: int | None = None

    def covers(self, deleted_by: datetime) -> bool:
        """Whether it removed what a delete committed by `deleted_by` left behind."""
        return self.ran and (self.oldest_snapshot is None or self.oldest_snapshot >= deleted_by)


def reclaim(warehouse: Warehouse, ds: DatasetSpec, limits: VacuumLimits) -> Reclaimed:
    """Make the space of `ds`'s deleted rows reusable now, as its engine allows; never raises
    for what the database refuses (the result says why)."""
    if ds.connection is None:
        return _not_run("not_in_catalog")
    engine = warehouse.engine(ds.connection)
    if engine.dialect.name == "postgresql":
        return _vacuum_postgres(engine, ds, limits)
    if engine.dialect.name == "sqlite":
        return _secure_delete_sqlite(engine, ds)
    return _not_run("unmanaged_engine", engine.dialect.name)


def _not_run(reason: str, engine: str = "none") -> Reclaimed:
    now = datetime.now(UTC)
    return Reclaimed(engine, None, now, now, False, reason, None, False)


def reclaim_after_delete(
    warehouse: Warehouse,
    ds: DatasetSpec,
    *,
    rows_deleted: int,
    request_ref: str,
    pending: PendingVacuums,
    limits: VacuumLimits,
    lakehouse: bool = False,
) -> SpaceEvidence:
    """Reclaim the space the request's committed delete of `rows_deleted` rows left in `ds`;
    what cannot be reclaimed now is listed in `pending` for the daily pass."""
    now = datetime.now(UTC)
    if lakehouse or rows_deleted <= 0:
        reason = "lakehouse" if lakehouse else "nothing_deleted"
        return SpaceEvidence(
            state="not_applicable", engine=_engine_name(warehouse, ds), reason=reason,
            note=REASONS[reason],
        )  # fmt: skip
    done = reclaim(warehouse, ds, limits)
    space = space_evidence(done, deleted_by=done.began, today=now.date())
    if space.state == "scheduled":
        assert space.reason is not None and space.by is not None
        pending.schedule(
            request_ref, ds.ref, deleted_by=done.began, reason=space.reason, due_on=space.by,
            at=done.finished,
        )  # fmt: skip
    if done.ran:  # a later erasure's VACUUM covers the earlier ones it can
        deleted_by = done.oldest_snapshot or done.began
        pending.covered(ds.ref, deleted_by=deleted_by, at=done.finished, by="erasure")
    return space


def space_evidence(done: Reclaimed, *, deleted_by: datetime, today: date) -> SpaceEvidence:
    """The evidence of `done` for a delete committed by `deleted_by`."""
    checked = done.snapshots_checked if done.engine == "postgresql" else None
    if done.covers(deleted_by):
        return SpaceEvidence(
            state="reclaimed",
            engine=done.engine,
            statement=done.statement,
            at=done.finished,
            reason=done.reason,  # "dropped" when the table went instead
            note=_reclaimed_note(done),
            dead_tuples_left=done.dead_tuples_left,
            snapshots_checked=checked,
        )
    reason = done.reason or "older_transaction"
    if reason in _FINAL:
        return SpaceEvidence(
            state="not_reclaimed", engine=done.engine, statement=done.statement, reason=reason,
            note=REASONS[reason],
        )  # fmt: skip
    return SpaceEvidence(
        state="scheduled",
        engine=done.engine,
        statement=done.statement,
        by=today + PASS_INTERVAL,
        reason=reason,
        note=f"not yet: {REASONS[reason]}. The deleted rows cannot be queried, but their bytes "
        "stay in the table's files until the daily pass (erasure_reprove) runs the statement",
        dead_tuples_left=done.dead_tuples_left,
        snapshots_checked=checked,
    )


# ---------------------------------------------------------------------------------------------
# The daily pass


class VacuumPassResult(BaseModel):
    """What the daily pass did: tables vacuumed, still pending (why), and overdue."""

    model_config = ConfigDict(frozen=True)

    vacuumed: list[str]  # "namespace/name" of each table whose entries it covered
    pending: dict[str, str]  # table -> reason, still awaiting a VACUUM
    overdue: dict[str, str]  # table -> the date it was due by, passed
    entries_covered: int

    def require(self) -> VacuumPassResult:
        """Itself, unless a scheduled VACUUM is past its date: ReclaimOverdue naming each."""
        if not self.overdue:
            return self
        lines = [
            f"{table} (due {due}: {REASONS.get(self.pending.get(table, ''), 'not run')})"
            for table, due in sorted(self.overdue.items())
        ]
        raise ReclaimOverdue(
            f"{len(self.overdue)} table(s) still hold deleted rows' bytes past the date their "
            f"completion record gave: {'; '.join(lines)}. Make the erasure's warehouse role the "
            "tables' owner (Postgres 17+: GRANT MAINTAIN), end the transactions open since the "
            "erasure, or raise ERASURE_VACUUM_STATEMENT_TIMEOUT_SECONDS; the next pass runs them"
        )


def run_pending(
    pending: PendingVacuums,
    catalog: Catalog,
    warehouse: Warehouse,
    limits: VacuumLimits,
    *,
    today: date | None = None,
) -> VacuumPassResult:
    """Vacuum each table with pending entries once, and mark what it covered."""
    today = today or datetime.now(UTC).date()
    by_table: dict[DatasetRef, list[PendingVacuum]] = {}
    for entry in pending.pending():
        by_table.setdefault(entry.dataset, []).append(entry)
    vacuumed: list[str] = []
    still: dict[str, str] = {}
    overdue: dict[str, str] = {}
    covered = 0
    for ref, entries in by_table.items():
        ds = catalog.dataset(ref)
        done = reclaim(warehouse, ds, limits) if ds is not None else _not_run("not_in_catalog")
        if done.ran:
            by = "dropped" if done.reason == "dropped" else "daily_pass"
            deleted_by = done.oldest_snapshot or done.began
            marked = pending.covered(ref, deleted_by=deleted_by, at=done.finished, by=by)
            covered += len(marked)
            if marked:
                vacuumed.append(ref.qualified)
        left = [e for e in entries if not done.covers(e.deleted_by)]
        if left:
            reason = "older_transaction" if done.ran else done.reason or "failed"
            pending.attempted(ref, reason=reason, at=done.finished)
            still[ref.qualified] = reason
            late = [e.due_on for e in left if e.overdue(today)]
            if late:
                overdue[ref.qualified] = min(late).isoformat()
    return VacuumPassResult(
        vacuumed=vacuumed, pending=still, overdue=overdue, entries_covered=covered
    )


# ---------------------------------------------------------------------------------------------
# Postgres


def _vacuum_postgres(engine: sa.Engine, ds: DatasetSpec, limits: VacuumLimits) -> Reclaimed:
    schema, name = split_name(ds.name)
    quoted = engine.dialect.identifier_preparer.format_table(sa.table(name, schema=schema))
    statement = f"VACUUM {quoted}"
    began = datetime.now(UTC)
    facts: dict[str, Any] = {"oldest": None, "checked": False}

    def result(ran: bool, reason: str | None, dead: int | None = None) -> Reclaimed:
        return Reclaimed(
            "postgresql", statement, began, datetime.now(UTC), ran, reason,
            facts["oldest"], facts["checked"], dead,
        )  # fmt: skip

    try:
        conn = engine.connect()
    except sa.exc.DBAPIError:
        return result(False, "unreachable")
    with conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        try:
            began = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
            if conn.execute(sa.text("SELECT to_regclass(:t)"), {"t": quoted}).scalar() is None:
                return result(True, "dropped")
            for setting, seconds in (
                ("lock_timeout", limits.lock_timeout_seconds),
                ("statement_timeout", limits.statement_timeout_seconds),
            ):
                conn.execute(
                    sa.text("SELECT set_config(:name, :value, false)"),
                    {"name": setting, "value": f"{max(1, round(seconds * 1000))}ms"},
                )
            session, prepared, unseen = conn.execute(
                _OLDEST_SNAPSHOT, {"hidden": _INSUFFICIENT}
            ).one()
            starts = [t for t in (session, prepared) if t is not None]
            facts["oldest"] = min(starts) if starts else None
            facts["checked"] = int(unseen) == 0
            started = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
            conn.exec_driver_sql(statement)
            last, dead = _last_vacuum(conn, quoted, started)
        except sa.exc.DBAPIError as exc:
            return result(False, _why(exc))
        finally:
            try:
                conn.exec_driver_sql("RESET lock_timeout")
                conn.exec_driver_sql("RESET statement_timeout")
            except sa.exc.DBAPIError:
                conn.invalidate()  # a broken connection is not handed back to the pool
    # The server skips a table the role may not vacuum with a WARNING, not an error.
    if last is None or last < started:
        return result(False, "not_permitted")
    return result(True, None, int(dead) if dead is not None else None)


# SQLSTATEs a VACUUM meets: lock_not_available, query_canceled, insufficient_privilege.
_SQLSTATE_REASONS = {
    "55P03": "lock_timeout",
    "57014": "statement_timeout",
    "42501": "not_permitted",
}


def _last_vacuum(conn: sa.Connection, table: str, started: datetime) -> tuple[Any, Any]:
    """pg_stat_user_tables' last_vacuum and n_dead_tup of `table` after a VACUUM. Postgres 15+
    writes them as VACUUM ends; an older server's statistics collector a moment later."""
    last, dead = conn.execute(_LAST_VACUUM, {"table": table}).one()
    tries = 0 if (conn.dialect.server_version_info or (15,)) >= (15,) else 20
    while (last is None or last < started) and tries:
        time.sleep(0.1)
        tries -= 1
        conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
        last, dead = conn.execute(_LAST_VACUUM, {"table": table}).one()
    return last, dead


def _why(exc: sa.exc.DBAPIError) -> str:
    code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
    if code in _SQLSTATE_REASONS:
        return _SQLSTATE_REASONS[code]
    return "unreachable" if exc.connection_invalidated else "failed"


# ---------------------------------------------------------------------------------------------
# SQLite


def _secure_delete_sqlite(engine: sa.Engine, ds: DatasetSpec) -> Reclaimed:
    schema, _name = split_name(ds.name)
    database = '"' + (schema or "main").replace('"', '""') + '"'
    began = datetime.now(UTC)
    statement = "PRAGMA secure_delete = ON"
    try:
        raw = engine.raw_connection()  # autocommit (the warehouse's connect hook): no BEGIN
    except sa.exc.DBAPIError:
        return Reclaimed("sqlite", statement, began, began, False, "unreachable", None, True)
    try:
        cursor = raw.cursor()
        secure = cursor.execute(f"PRAGMA {database}.secure_delete").fetchone()[0]
        journal = str(cursor.execute(f"PRAGMA {database}.journal_mode").fetchone()[0]).lower()
        busy = 0
        if secure == 1 and journal == "wal":
            statement += f"; PRAGMA {database}.wal_checkpoint(TRUNCATE)"
            busy = cursor.execute(f"PRAGMA {database}.wal_checkpoint(TRUNCATE)").fetchone()[0]
        cursor.close()
    except Exception:  # sqlite3.Error, or the driver module's own
        return Reclaimed("sqlite", statement, began, datetime.now(UTC), False, "failed", None, True)
    finally:
        raw.close()
    # 1 is on; 2 is "fast", which leaves deleted content on freelist pages.
    reason = None if secure == 1 else "secure_delete_off"
    if reason is None and busy:
        reason = "checkpoint_busy"
    return Reclaimed("sqlite", statement, began, datetime.now(UTC), reason is None, reason,
                     None, True)  # fmt: skip


def _reclaimed_note(done: Reclaimed) -> str:
    if done.reason == "dropped":
        return REASONS["dropped"] + "; the bytes may stay on disk until overwritten"
    if done.engine == "sqlite":
        return (
            "secure_delete was on for the delete: SQLite overwrote the rows with zeros in the "
            "database file's pages; the rollback journal or WAL that held them is deleted or "
            "checkpointed, its bytes may stay on disk until overwritten, and backups keep them "
            "until their retention"
        )
    seen = (
        ""
        if done.snapshots_checked
        else " (sessions of other roles could not be inspected: grant the role "
        "pg_read_all_stats so an older open transaction is seen)"
    )
    return (
        "VACUUM removed the deleted rows' versions from the table's heap and indexes and made "
        "their space reusable; the bytes may stay in the data files until overwritten, and "
        f"WAL, replicas and base backups keep them until their retention{seen}"
    )


def _engine_name(warehouse: Warehouse, ds: DatasetSpec) -> str:
    return warehouse.engine(ds.connection).dialect.name if ds.connection else "none"
