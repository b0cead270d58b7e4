"""Iceberg tables through pyiceberg: erase a person's rows from the current snapshot and from
every snapshot, manifest and file that kept them, in small resumable steps.

`erase` runs the steps in order; each checks its own precondition, so a retry after a crash
at any point finishes the job and a run on a clean table changes nothing:

1. refuse when the table does not own its files (`gc.enabled=false`); when a branch or tag
   other than `main` holds the subject (rows of theirs, or a summary or manifest naming
   them: a person decides); when delete files mask rows still present in data files; when a
   file holding them lives outside the table's own locations (it cannot be removed);
2. `delete_rows`: copy-on-write delete in one transaction (pyiceberg rewrites the affected
   files whatever `write.delete.mode` says), with a manifest-only snapshot whose manifests
   list no removed file (an entry of status DELETED keeps the removed file's column bounds,
   which may be the subject's value): those listing only removed files are dropped, those
   listing live files too (another engine's delete) written again without them;
3. `expire_snapshots_holding`: exactly the snapshots that hold the subject (their rows, or a
   summary, manifest list, manifest or file naming them); the others, which never held them
   (a staged write-audit-publish snapshot, another branch's ancestry), stay;
4. `remove_unreferenced_files`: manifest lists, manifests, data, delete and statistics files
   of the expired snapshots (found through the table's previous metadata files, so a retry
   after the expiry still finds them) that no retained snapshot references;
5. `remove_garbage_holding`: files in the table's own locations that no retained snapshot
   references and in which the subject is found: those some metadata file named; a file
   none named (a concurrent writer's, not committed yet) only once older than
   UNNAMED_MIN_AGE, and until then left for `residue` to report.

Only files in the table's location, `write.data.path` and `write.metadata.path` are ever
removed (erasure.lakehouse.iceberg_files).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import reduce

import pyarrow.fs as pafs  # type: ignore[import-untyped, unused-ignore]
from pyiceberg.catalog import Catalog
from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, ValidationException
from pyiceberg.expressions import AlwaysFalse, BooleanExpression, In, Or
from pyiceberg.expressions.visitors import bind
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.transforms import IdentityTransform, TruncateTransform
from pyiceberg.types import PrimitiveType

from erasure.lakehouse.errors import LakehouseError, LakehouseRefused
from erasure.lakehouse.evidence import DeletedRows, Expiry, FileKind, HistoryErasure, Residue
from erasure.lakehouse.files import (
    UNNAMED_MIN_AGE,
    Located,
    Verdict,
    directories_naming,
    full_path,
    json_holds,
    kinds_count,
    list_files,
    older_than,
    remove_empty_directories_naming,
    search_located,
    search_path,
)
from erasure.lakehouse.iceberg_files import TableFiles
from erasure.lakehouse.probe import (
    TRUNCATED_BOUND_MIN_CHARS,
    Probe,
    redact,
    sharing_a_beginning,
)
from erasure.lakehouse.rows import matchable, matching_rows, strings_beginning, value_counts
from erasure.lakehouse.table import Match, SubjectValues

MAIN = "main"
# The summary property of the manifest-only snapshot `delete_rows` commits after the delete.
DROPPED_MANIFESTS_PROPERTY = "erasure.dropped-deleted-manifests"
# The names pyiceberg gives the files a commit writes: data (`00000-<task>-<uuid>.parquet`),
# manifests (`<uuid>-m<n>.avro`) and manifest lists (`snap-<id>-<attempt>-<uuid>.avro`).
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_WRITTEN_NAME = re.compile(
    rf"\d+-\d+-{_UUID}\.parquet|{_UUID}-m\d+\.avro|snap-\d+-\d+-{_UUID}\.avro"
)
_REMOVAL_ORDER: tuple[FileKind, ...] = ("data", "delete", "statistics", "manifest", "manifest_list")


@dataclass
class _Done:
    """What the steps of one `erase` did, as they go."""

    deleted: DeletedRows = field(default_factory=lambda: DeletedRows(0, 0))
    snapshots_expired: int = 0
    removed: list[FileKind] = field(default_factory=list)
    unnamed_left: int = 0


class IcebergTable:
    """One Iceberg table of a pyiceberg catalog (SQL, REST, Glue, Hive)."""

    format = "iceberg"

    def __init__(self, catalog: Catalog, identifier: str) -> None:
        self.identifier = identifier
        self.label = f"iceberg {identifier}"
        self._catalog = catalog
        try:
            self._table = catalog.load_table(identifier)
        except NoSuchTableError:
            raise LakehouseError(
                f"{self.label}: no such table in the catalog; check the namespace and table "
                "name (namespace.table) and the catalog's properties"
            ) from None

    @property
    def table(self) -> Table:
        """The pyiceberg table, as last read."""
        return self._table

    def physical_id(self) -> str:
        return str(self._table.metadata.table_uuid)

    def refresh(self) -> Table:
        """The table's current metadata, read again from the catalog."""
        self._table = self._table.refresh()
        return self._table

    def _files(self, table: Table | None = None) -> TableFiles:
        return TableFiles(table if table is not None else self._table, self.label)

    # Reading ----------------------------------------------------------------------------

    def columns(self) -> list[str]:
        """The top-level columns of the current schema."""
        return [f.name for f in self._table.schema().fields]

    def matchable(self) -> dict[str, bool]:
        """Per top-level column: whether it holds text or whole numbers (what a `Match`
        judges); a binary, nested or other column holds values no identifier is compared to."""
        schema = self._table.schema().as_arrow()
        return {field.name: matchable(field.type) for field in schema}

    def distinct(self, columns: Sequence[str]) -> dict[str, dict[object, int]]:
        """Per column, each value of the current snapshot and its rows (a projected scan)."""
        table = self.refresh()
        self._require_columns(columns)
        if table.current_snapshot() is None or not columns:
            return {column: {} for column in columns}
        reader = table.scan(selected_fields=tuple(columns)).to_arrow_batch_reader()
        return value_counts(reader, columns)

    def count(self, values: SubjectValues) -> int:
        """Current rows where any named column holds one of its values."""
        table = self.refresh()
        return self._count(table, self.subject_filter(values), list(values))

    def subject_filter(self, values: SubjectValues) -> BooleanExpression:
        """The row filter of the subject's rows: the one both `count` and the delete use."""
        schema = self._table.schema()
        self._require_columns(list(values))
        terms: list[BooleanExpression] = []
        for column, given in values.items():
            items = {v for v in given if v is not None}
            if items:
                terms.append(In(term=column, literals=items))
        if not terms:
            return AlwaysFalse()
        expression = reduce(Or, terms)
        try:
            bind(schema, expression, case_sensitive=True)
        except Exception:
            # `from None`: pyiceberg's message quotes the literal it could not convert.
            raise LakehouseError(
                f"{self.label}: a located value does not fit the type of its column "
                f"({', '.join(values)}); re-run locate against the table's current schema"
            ) from None
        return expression

    def _count(self, table: Table, expression: BooleanExpression, columns: list[str]) -> int:
        if isinstance(expression, AlwaysFalse) or table.current_snapshot() is None:
            return 0
        scan = table.scan(row_filter=expression, selected_fields=tuple(columns))
        return sum(batch.num_rows for batch in scan.to_arrow_batch_reader())

    def _require_columns(self, columns: Sequence[str]) -> None:
        known = self.columns()
        missing = [c for c in columns if c not in known]
        if missing:
            raise LakehouseError(
                f"{self.label}: no column {', '.join(map(repr, missing))} in the current schema "
                f"(columns: {', '.join(known)}); re-run locate against the table"
            )

    def _rows_matching(
        self, table: Table, snapshot_id: int, match: Match, columns: Sequence[str]
    ) -> int:
        """Rows of a snapshot that `match` accepts, its columns found by their field ids: a
        column renamed since (its current name is what `columns` and `match` say) is read by
        the name it had then."""
        snapshot = table.metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            raise LakehouseError(f"{self.label}: snapshot {snapshot_id} is not in the metadata")
        then = _schema_of(table.metadata, snapshot)
        names = _names_then(table.schema(), then, columns)
        if not names:
            return 0
        scan = table.scan(snapshot_id=snapshot_id, selected_fields=tuple(names))
        batches = (
            batch.rename_columns([names.get(n, n) for n in batch.schema.names])
            for batch in scan.to_arrow_batch_reader()
        )
        return matching_rows(batches, match, list(names.values()))

    def refs_holding(self, match: Match, columns: Sequence[str]) -> list[str]:
        """Branches and tags other than `main` whose snapshot has a row `match` accepts, or
        whose summary, manifest list or manifests name the subject (a bound of theirs)."""
        table = self.refresh()
        probe = self._probe(table.metadata, match, columns, {})
        return self._refs_holding(table, match, columns, probe)

    def _refs_holding(
        self, table: Table, match: Match, columns: Sequence[str], probe: Probe
    ) -> list[str]:
        files = self._files(table)
        holding = []
        for name, ref in sorted(table.metadata.refs.items()):
            if name == MAIN:
                continue
            snapshot = table.metadata.snapshot_by_id(ref.snapshot_id)
            if snapshot is None:
                continue
            if self._rows_matching(table, ref.snapshot_id, match, columns) or _metadata_holds(
                files, snapshot, probe
            ):
                holding.append(name)
        return holding

    # Erasing ----------------------------------------------------------------------------

    def erase(
        self,
        values: SubjectValues,
        match: Match,
        columns: Sequence[str],
        *,
        before_commit: Callable[[HistoryErasure], None] | None = None,
        staged_before: Sequence[str] = (),
        search: SubjectValues | None = None,
    ) -> HistoryErasure:
        """Delete the subject's rows copy-on-write, expire the snapshots that held them, and
        remove every file that held them; resumable, and a no-op (already_done) on a clean
        table. `staged_before`: the files an earlier try logged as staged (its process died
        at its commit): removed, however young, where no snapshot uses them. `search`: what
        the history and files are searched for (`residue`'s values), `values` by default."""
        table = self.refresh()
        self.check_owns_its_files()
        snapshots_before = len(table.metadata.snapshots)
        probe = self._probe(table.metadata, match, columns, values if search is None else search)
        probe = self._excusing_others(table, probe, match, columns)
        holding = self._refs_holding(table, match, columns, probe)
        if holding:
            raise LakehouseRefused(
                f"{self.label}: {len(holding)} branch(es) or tag(s) other than main hold the "
                "subject (rows, or a manifest or summary naming them; see the refusal's names). "
                "Erasing main would leave them there and dropping a ref is not this job's "
                "decision: ask the table's owner to drop or re-point them, then retry",
                reason="refs_hold_subject",
                names=holding,
            )
        self.check_delete_files()
        self.check_files_outside(probe)
        done = _Done()

        def log(deleted: DeletedRows) -> None:
            if before_commit is not None:
                logged = self._evidence(_Done(deleted), snapshots_before, committed=False)
                # An earlier try's names too: it may have died before this try removes them.
                staged = sorted({*staged_before, *deleted.staged})
                before_commit(logged.model_copy(update={"staged": staged}))

        done.deleted = self.delete_rows(values, before_commit=log)
        rows_after = self.count(values)
        if rows_after:
            raise LakehouseError(
                f"{self.label}: {rows_after} of the subject's row(s) are in the current snapshot "
                "after the delete (a concurrent writer added them back); no history was "
                "expired. Stop the writer and retry"
            )
        done.snapshots_expired += self.expire_snapshots_holding(probe)
        done.removed += self.remove_unreferenced_files()
        removed, done.unnamed_left = self.remove_garbage_holding(probe, set(staged_before))
        done.removed += removed
        return self._evidence(done, snapshots_before, committed=True, expiry="holding_subject")

    def _evidence(
        self,
        done: _Done,
        snapshots_before: int,
        *,
        committed: bool,
        expiry: Expiry = "all_older",
    ) -> HistoryErasure:
        table = self._table
        deleted = done.deleted
        changed = bool(
            deleted.rows_deleted
            or deleted.manifests_dropped
            or done.snapshots_expired
            or done.removed
            or done.unnamed_left  # not done: a file of theirs is left for a later retry
        )
        heads = {ref.snapshot_id for ref in table.metadata.refs.values()}
        return HistoryErasure(
            format="iceberg",
            table=self.label,
            rows_before=deleted.rows_before,
            rows_deleted=deleted.rows_deleted,
            rows_after=0,
            snapshots_before=snapshots_before,
            snapshots_written=max(
                0, len(table.metadata.snapshots) + done.snapshots_expired - snapshots_before
            ),
            snapshots_after=len(table.metadata.snapshots),
            snapshots_expired=done.snapshots_expired,
            files_removed=kinds_count(done.removed),
            refs_kept=sorted(name for name in table.metadata.refs if name != MAIN),
            copy_on_write=not self._live_delete_files(table),
            delete_mode=table.properties.get(
                TableProperties.DELETE_MODE, TableProperties.DELETE_MODE_DEFAULT
            ),
            already_done=not changed,
            effective_at=datetime.now(UTC),
            committed=committed,
            expiry=expiry,
            snapshots_kept=sum(1 for s in table.metadata.snapshots if s.snapshot_id not in heads)
            if committed
            else 0,
            files_unnamed_left=done.unnamed_left,
        )

    def check_owns_its_files(self) -> None:
        """Refuse a table that says its files may be other tables' too (`gc.enabled=false`:
        a snapshot or migration of another table, `add_files`): removing them could break
        those tables."""
        if not self._files(self.refresh()).gc_enabled():
            raise LakehouseRefused(
                f"{self.label}: the table sets gc.enabled=false: its files may be shared with "
                "other tables, so none may be removed and the history holding the subject "
                "cannot be erased. Have the table's owner rewrite its data into files the "
                "table owns and set gc.enabled=true (or erase the table it shares files "
                "with), then retry",
                reason="gc_disabled",
            )

    def check_files_outside(self, probe: Probe) -> None:
        """Refuse when a file some metadata names holds the subject and lives outside the
        table's own locations (another table's, added with `add_files`): it cannot be
        removed, and rewriting the rows would leave it there."""
        files = self._files(self.refresh())
        outside = [key for key in files.named() if not files.owns(key)]
        holding = [
            key for key in outside if search_path(files.located(key).fs, key, probe, key) == "holds"
        ]
        if holding:
            raise LakehouseRefused(
                f"{self.label}: {len(holding)} file(s) holding the subject live outside the "
                "table's location and data path (see the refusal's names): they may be another "
                "table's, and this job removes only the table's own files. Erase them where "
                "they belong (or have the owner rewrite them into this table), then retry",
                reason="files_outside",
                names=[redact(key, probe) for key in holding],
            )

    def check_delete_files(self) -> None:
        """Refuse a current snapshot with delete files: the rows they mask (perhaps the
        subject's, deleted merge-on-read by another engine) are still in its data files."""
        table = self.refresh()
        live = self._live_delete_files(table)
        if live:
            raise LakehouseRefused(
                f"{self.label}: the current snapshot has {live} delete file(s) (merge-on-read "
                "deletes by another engine); the rows they mask are still in data files. "
                "Compact the table so deletes are applied (Spark: rewrite_data_files with "
                "delete-file-threshold=1), then retry",
                reason="delete_files",
            )

    def _live_delete_files(self, table: Table) -> int:
        snapshot = table.current_snapshot()
        if snapshot is None:
            return 0
        # Every manifest, whatever its content says: a delete file is a delete file.
        return sum(
            1
            for manifest in snapshot.manifests(table.io)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            if entry.data_file.content != DataFileContent.DATA
        )

    def delete_rows(
        self,
        values: SubjectValues,
        *,
        before_commit: Callable[[DeletedRows], None] | None = None,
        drop_deleted_manifests: bool = True,
    ) -> DeletedRows:
        """Step 2: delete the subject's rows copy-on-write in one commit.

        The commit also drops the manifests that list the removed files (see the module); when
        none of the rows is left, only such manifests are dropped, if any remain."""
        table = self.refresh()
        expression = self.subject_filter(values)
        columns = list(values)
        rows_before = self._count(table, expression, columns)
        if not rows_before:
            dropped = self.drop_deleted_manifests() if drop_deleted_manifests else False
            return DeletedRows(0, 0, dropped)
        staging: list[Table] = []
        try:
            result = self._delete_in_one_commit(
                table,
                expression,
                columns,
                rows_before,
                before_commit,
                drop_deleted_manifests,
                staging,
            )
        except BaseException as exc:
            # The staged commit wrote its files before it was refused (the log before the
            # commit failed, a check, a conflict, a kill): a manifest of them keeps the
            # subject's bounds. They are this attempt's own (named by its staged snapshots
            # only): removed.
            if staging:
                self._remove_staged(table, staging[0])
            if isinstance(exc, CommitFailedException | ValidationException):
                # Its message may quote the delete's filter, i.e. the values.
                raise LakehouseError(
                    f"{self.label}: the table changed while the delete was staged (another "
                    "writer committed) and its commit was refused: nothing of this try was "
                    "committed. Retry"
                ) from None
            raise
        self._table = table
        return result

    def _remove_staged(self, table: Table, staged: Table) -> None:
        new = _staged_snapshots(table, staged)
        try:
            now = self.refresh()
        except Exception:  # the catalog cannot say whether it committed: leave the files
            return
        if any(s.snapshot_id in {c.snapshot_id for c in now.metadata.snapshots} for s in new):
            return  # the commit went through after all: its files are the table's
        files = self._files(staged)
        mine = files.of_snapshots(new, strict=False)
        used = self._files(now).retained()
        for key in sorted(mine):
            if key not in used and files.owns(key):
                fs = files.located(key).fs
                if _exists(fs, key):
                    fs.delete_file(key)

    def _delete_in_one_commit(
        self,
        table: Table,
        expression: BooleanExpression,
        columns: list[str],
        rows_before: int,
        before_commit: Callable[[DeletedRows], None] | None,
        drop_deleted_manifests: bool,
        staging: list[Table],
    ) -> DeletedRows:
        with warnings.catch_warnings():
            # "Merge on read is not yet supported, falling back to copy-on-write": the delete
            # is copy-on-write whatever the table asks; the evidence records what it asked.
            warnings.simplefilter("ignore", UserWarning)
            with table.transaction() as tx:
                tx.delete(expression)
                dropped = _drop_deleted_manifests(tx, table.io) if drop_deleted_manifests else False
                staged = Table(
                    table.name(),
                    tx.table_metadata,
                    table.metadata_location,
                    table.io,
                    table.catalog,
                )
                staging.append(staged)
                remaining = self._count(staged, expression, columns)
                if remaining:
                    raise LakehouseError(
                        f"{self.label}: {remaining} of the subject's row(s) would remain after "
                        "the delete; nothing was committed. Report this with the table's "
                        "metadata location"
                    )
                if self._live_delete_files(staged):
                    raise LakehouseError(
                        f"{self.label}: the delete wrote delete files instead of rewriting data "
                        "files (merge-on-read); nothing was committed. Pin a pyiceberg that "
                        "deletes copy-on-write"
                    )
                # The snapshot summaries' totals: a count independent of the filter's.
                deleted = _records(table) - _records(staged)
                result = DeletedRows(
                    rows_before,
                    deleted if deleted > 0 else rows_before,
                    dropped,
                    _staged_names(table, staged, self._files(staged)),
                )
                if before_commit is not None:
                    before_commit(result)
        return result

    def drop_deleted_manifests(self) -> bool:
        """Commit a manifest-only snapshot without the manifests that list only removed files;
        whether there were any."""
        table = self.refresh()
        with table.transaction() as tx:
            dropped = _drop_deleted_manifests(tx, table.io)
        return dropped

    def expire_snapshots(self) -> int:
        """Expire every snapshot but the heads of main and the other refs (after a rebuild);
        how many."""
        table = self.refresh()
        heads = {ref.snapshot_id for ref in table.metadata.refs.values()}
        return self._expire([s.snapshot_id for s in table.metadata.snapshots], heads)

    def expire_snapshots_holding(self, probe: Probe) -> int:
        """Step 3: expire exactly the snapshots, other than the refs' heads, that hold the
        subject: a row of theirs is in a file they use, or their summary, manifest list or a
        manifest names them. Nothing else must go with them: a snapshot's files are its own
        to reference, whatever its parent. How many."""
        table = self.refresh()
        files = self._files(table)
        heads = {ref.snapshot_id for ref in table.metadata.refs.values()}
        verdicts: dict[str, Verdict] = {}
        holding = [
            s.snapshot_id
            for s in table.metadata.snapshots
            if s.snapshot_id not in heads and _snapshot_holds(files, s, probe, verdicts)
        ]
        return self._expire(holding, heads)

    def _expire(self, snapshot_ids: Iterable[int], heads: set[int]) -> int:
        expired = [s for s in snapshot_ids if s not in heads]
        if expired:
            self._table.maintenance.expire_snapshots().by_ids(expired).commit()
            self.refresh()
        return len(expired)

    def remove_unreferenced_files(self) -> list[FileKind]:
        """Step 4: remove the files of snapshots no longer in the metadata (read from the
        previous metadata files) that no retained snapshot uses and that the table owns; the
        kinds removed."""
        table = self.refresh()
        files = self._files(table)
        self._require_gc(files)
        retained = files.retained()
        current_ids = {s.snapshot_id for s in table.metadata.snapshots}
        expired: dict[int, Snapshot] = {}
        candidates: dict[str, FileKind] = {}
        for previous in files.previous_metadata():
            for snapshot in previous.snapshots:
                if snapshot.snapshot_id not in current_ids:
                    expired.setdefault(snapshot.snapshot_id, snapshot)
            for statistics in [*previous.statistics, *previous.partition_statistics]:
                if statistics.snapshot_id not in current_ids:
                    candidates[files.key(statistics.statistics_path)] = "statistics"
        candidates.update(files.of_snapshots(expired.values(), strict=False))
        removed: list[FileKind] = []
        for kind in _REMOVAL_ORDER:  # leaves first: a retry can still walk from what is left
            for key, key_kind in sorted(candidates.items()):
                if key_kind != kind or key in retained or not files.owns(key):
                    continue
                fs = files.located(key).fs
                if _exists(fs, key):
                    fs.delete_file(key)
                    removed.append(kind)
        return removed

    def remove_garbage_holding(
        self, probe: Probe, staged_before: set[str] | None = None
    ) -> tuple[list[FileKind], int]:
        """Step 5: remove the files in the table's own locations that no retained snapshot
        uses and in which the subject is found, and empty directories named after them; a
        file no metadata ever named only once older than UNNAMED_MIN_AGE, unless an earlier
        try of this erasure staged it (`staged_before`, by name). The kinds removed, and how
        many such files were left."""
        ours = staged_before or set()
        table = self.refresh()
        files = self._files(table)
        self._require_gc(files)
        retained = files.retained()
        named = files.named()
        removed: list[FileKind] = []
        left = 0
        for root in files.roots():
            fs = files.filesystem_of(root)
            for relative in list_files(fs, root):
                key = full_path(root, relative)
                if key in retained or search_path(fs, key, probe, files.shown(key)) != "holds":
                    continue
                mine = key.rsplit("/", 1)[-1] in ours
                if key not in named and not mine and not older_than(fs, key, UNNAMED_MIN_AGE):
                    left += 1  # perhaps a concurrent writer's, not committed yet
                    continue
                fs.delete_file(key)
                removed.append(named.get(key) or _kind_of(relative))
            removed += ["directory"] * remove_empty_directories_naming(fs, root, probe)
        return removed, left

    def _require_gc(self, files: TableFiles) -> None:
        if not files.gc_enabled():
            self.check_owns_its_files()

    def expire_history(self) -> HistoryErasure:
        """Keep only the current snapshot (after a rebuild overwrote the table) and remove every
        file it does not use; refuse when another ref points at an older snapshot."""
        table = self.refresh()
        self.check_owns_its_files()
        head = table.metadata.current_snapshot_id
        behind = sorted(
            name
            for name, ref in table.metadata.refs.items()
            if name != MAIN and ref.snapshot_id != head
        )
        if behind:
            raise LakehouseRefused(
                f"{self.label}: {len(behind)} branch(es) or tag(s) point at an older snapshot "
                "(see the refusal's names); it may hold what the rebuild replaced. Ask the "
                "table's owner to drop or re-point them, then retry",
                reason="refs_behind",
                names=behind,
            )
        snapshots_before = len(table.metadata.snapshots)
        self.check_delete_files()
        done = _Done(DeletedRows(0, 0, self.drop_deleted_manifests()))
        done.snapshots_expired = self.expire_snapshots()
        done.removed = self.remove_unreferenced_files()
        return self._evidence(done, snapshots_before, committed=True)

    # Proving ----------------------------------------------------------------------------

    def residue(self, match: Match, columns: Sequence[str], values: SubjectValues) -> Residue:
        """Read every snapshot in the metadata, every file in the table's own locations and
        every file a retained snapshot references wherever it lives, and report where the
        subject is still found; shares no bookkeeping with `erase`."""
        table = self.refresh()
        checked, by_snapshot, unreadable_snapshots = 0, {}, []
        for snapshot in table.metadata.snapshots:
            try:
                rows = self._rows_matching(table, snapshot.snapshot_id, match, columns)
            except Exception:
                unreadable_snapshots.append(str(snapshot.snapshot_id))
                continue
            checked += 1
            if rows:
                by_snapshot[str(snapshot.snapshot_id)] = rows
        probe = self._probe(table.metadata, match, columns, values)
        probe = self._excusing_others(table, probe, match, columns)
        files = self._files(table)
        located: dict[str, Located] = {}
        directories: list[str] = []
        for root in files.roots():
            fs = files.filesystem_of(root)
            for relative in list_files(fs, root):
                key = full_path(root, relative)
                located.setdefault(key, Located(fs, key, files.shown(key)))
            directories += [
                files.shown(full_path(root, d)) for d in directories_naming(fs, root, probe)
            ]
        try:
            referenced = files.of_snapshots(table.metadata.snapshots, strict=False)
        except Exception:
            referenced = {}
        for key in referenced:
            if key not in located:
                located[key] = files.located(key)
        files_checked, holding, unreadable = search_located(located.values(), probe)
        refs = [
            name
            for name, ref in sorted(table.metadata.refs.items())
            if name != MAIN
            and (
                str(ref.snapshot_id) in by_snapshot
                or _ref_metadata_holds(files, table.metadata, ref.snapshot_id, probe)
            )
        ]
        return Residue(
            format="iceberg",
            table=self.label,
            snapshots_checked=checked,
            rows_by_snapshot=by_snapshot,
            snapshots_unreadable=unreadable_snapshots,
            files_checked=files_checked,
            files_holding=[redact(f, probe) for f in [*directories, *holding]],
            files_unreadable=[redact(f, probe) for f in unreadable],
            refs=refs,
        )

    @staticmethod
    def _excusing_others(table: Table, probe: Probe, match: Match, columns: Sequence[str]) -> Probe:
        """`probe` knowing the values of `columns` other people hold in the current snapshot
        of `table` that begin as one of theirs does, and the data files it uses
        (`Probe.others`, `Probe.live_files`); unchanged when that snapshot cannot be read."""
        snapshot = table.current_snapshot()
        present = [c for c in columns if c in {f.name for f in table.schema().fields}]
        if snapshot is None or not present or not probe.texts:
            return probe
        size = TRUNCATED_BOUND_MIN_CHARS  # a shorter value has no bound cut short of it
        heads = {t.lower()[:size] for t in probe.texts if len(t.lower()) >= size}
        try:
            reader = table.scan(selected_fields=tuple(present)).to_arrow_batch_reader()
            # Lower-cased in Arrow first (a value only NFKC would bring near stays out: fewer
            # excuses, never more), then as `cut_short` compares.
            others = {
                value
                for column, near in strings_beginning(reader, present, heads).items()
                for value in sharing_a_beginning(near, probe.texts)
                if not match(column, value)
            }
            if not others:
                return probe
            live = {
                entry.data_file.file_path
                for manifest in snapshot.manifests(table.io)
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            }
        except Exception:  # nothing excuses a value then: verify fails rather than passes
            return probe
        return replace(probe, others=frozenset(others), live_files=frozenset(live))

    @staticmethod
    def _probe(
        metadata: TableMetadata, match: Match, columns: Sequence[str], values: SubjectValues
    ) -> Probe:
        """The file search's view of the subject, by field id: a column renamed since a file
        was written is found by its id and judged under its current name; a partition by
        its source column."""
        fields: dict[int, tuple[str, PrimitiveType]] = {}
        current = metadata.schema()
        for schema in [*metadata.schemas, current]:  # the current schema's names win
            for nested in schema.fields:
                if isinstance(nested.field_type, PrimitiveType):
                    fields[nested.field_id] = (nested.name, nested.field_type)
        names = {fid: name for fid, (name, _) in fields.items()}
        specs = metadata.specs()
        keyed = [
            spec_field
            for spec in specs.values()
            for spec_field in spec.fields
            if isinstance(spec_field.transform, IdentityTransform | TruncateTransform)
            and spec_field.source_id in names
        ]
        partition_columns = {f.name: names[f.source_id] for f in keyed}
        truncating = {f.name for f in keyed if isinstance(f.transform, TruncateTransform)}

        def decode_bound(field_id: int, raw: bytes) -> tuple[str, object] | None:
            known = fields.get(field_id)
            if known is None:
                return None
            try:
                return known[0], from_bytes(known[1], raw)
            except Exception:
                return None

        def decode_summary_bound(
            spec_id: int, position: int, raw: bytes
        ) -> tuple[str, object] | None:
            spec = specs.get(spec_id)
            if spec is None or position >= len(spec.fields):
                return None
            spec_field = spec.fields[position]
            if not isinstance(spec_field.transform, IdentityTransform):
                return None
            return decode_bound(spec_field.source_id, raw)

        return Probe.build(
            match,
            columns,
            values,
            field_names=names,
            decode_bound=decode_bound,
            decode_summary_bound=decode_summary_bound,
            partition_columns=partition_columns,
            truncating=truncating,
        )


def _schema_of(metadata: TableMetadata, snapshot: Snapshot) -> Schema:
    """The schema a snapshot was written with (the current one when it does not say)."""
    if snapshot.schema_id is not None:
        for schema in metadata.schemas:
            if schema.schema_id == snapshot.schema_id:
                return schema
    return metadata.schema()


def _names_then(current: Schema, then: Schema, columns: Sequence[str]) -> dict[str, str]:
    """Each of `columns` (current names) present in `then`: its name there -> its name now,
    by field id (a column not in the current schema: by name)."""
    top_level = {f.field_id: f.name for f in then.fields}
    now = {f.name: f.field_id for f in current.fields}
    names: dict[str, str] = {}
    for column in columns:
        field_id = now.get(column)
        if field_id is not None:
            if field_id in top_level:
                names[top_level[field_id]] = column
        elif column in top_level.values():
            names[column] = column
    return names


def _metadata_holds(files: TableFiles, snapshot: Snapshot, probe: Probe) -> bool:
    """Whether a snapshot's summary, manifest list or manifests name the subject (its data
    files are read by `_rows_matching`)."""
    if snapshot.summary is not None and json_holds(snapshot.summary.model_dump(), probe):
        return True
    metadata_files = [
        key
        for key, kind in files.of_snapshot(snapshot).items()
        if kind in ("manifest", "manifest_list")
    ]
    return any(_verdict(files, key, probe, {}) == "holds" for key in metadata_files)


def _ref_metadata_holds(
    files: TableFiles, metadata: TableMetadata, snapshot_id: int, probe: Probe
) -> bool:
    snapshot = metadata.snapshot_by_id(snapshot_id)
    if snapshot is None:
        return False
    try:
        return _metadata_holds(files, snapshot, probe)
    except LakehouseError:
        return False  # its manifests cannot be read: residue lists the snapshot unreadable


def _snapshot_holds(
    files: TableFiles, snapshot: Snapshot, probe: Probe, verdicts: dict[str, Verdict]
) -> bool:
    """Whether a snapshot holds the subject: its summary names them, or a file it uses (its
    manifest list, manifests, live data and delete files) holds them or cannot be read."""
    if snapshot.summary is not None and json_holds(snapshot.summary.model_dump(), probe):
        return True
    try:
        used = files.of_snapshot(snapshot)
    except LakehouseError:
        return True  # what it references is unknown: it goes
    return any(_verdict(files, key, probe, verdicts) != "clean" for key in used)


def _verdict(files: TableFiles, key: str, probe: Probe, verdicts: dict[str, Verdict]) -> Verdict:
    if key not in verdicts:
        located = files.located(key)
        verdicts[key] = search_path(located.fs, key, probe, located.shown)
    return verdicts[key]


def _drop_deleted_manifests(tx: Transaction, io: FileIO) -> bool:
    """Stage a manifest-only snapshot on main whose manifests list live files only, when a
    manifest of its head lists a removed file (an entry of status DELETED keeps the removed
    file's column bounds, which may be the subject's value, truncated): a manifest listing
    only removed files is dropped, one listing removed and live files (Spark's and Trino's
    deletes write such, the removed file beside those kept) is written again without them."""
    snapshot = tx.table_metadata.snapshot_by_name(MAIN)
    if snapshot is None:
        return False
    if not any(_lists_removed(m, io) for m in snapshot.manifests(io)):
        return False
    _LiveEntriesOnly(tx, io).commit()
    return True


def _lists_removed(manifest: ManifestFile, io: FileIO) -> bool:
    """Whether a manifest has no live entry (dropped) or is a data manifest with an entry of
    a removed file (written again without it). A delete manifest listing live delete files is
    kept whole (pyiceberg has no writer for it; `check_delete_files` refuses live ones), so it
    is never reported: a retry would otherwise commit another snapshot each time."""
    if not (manifest.has_added_files() or manifest.has_existing_files()):
        return True
    if manifest.content != ManifestContent.DATA:
        return False
    if manifest.deleted_files_count is not None:  # optional in format version 1
        return manifest.deleted_files_count > 0
    entries = manifest.fetch_manifest_entry(io, discard_deleted=False)
    return any(e.status == ManifestEntryStatus.DELETED for e in entries)


class _LiveEntriesOnly(_FastAppendFiles):
    """A fast append of nothing whose manifests list live files only (_drop_deleted_manifests).

    pyiceberg 0.12 has no manifest rewrite (apache/iceberg-python#3629, pull request #3631 is
    open): its fast append keeps every manifest of the parent that lists a live file whole.
    This one writes such a manifest again without its removed entries, as pyiceberg's own
    delete writes a manifest it filters: the live entries EXISTING, with the snapshot and
    sequence numbers they had. tests/unit/lakehouse/test_iceberg.py says when pyiceberg has
    its own."""

    def __init__(self, tx: Transaction, io: FileIO) -> None:
        super().__init__(
            operation=Operation.APPEND,
            transaction=tx,
            io=io,
            branch=MAIN,
            snapshot_properties={DROPPED_MANIFESTS_PROPERTY: "true"},
        )

    def _existing_manifests(self) -> list[ManifestFile]:
        kept = []
        for manifest in super()._existing_manifests():  # those listing a live file
            if not _lists_removed(manifest, self._io):
                kept.append(manifest)
                continue
            with self.new_manifest_writer(self.spec(manifest.partition_spec_id)) as writer:
                for entry in manifest.fetch_manifest_entry(self._io, discard_deleted=True):
                    writer.add_entry(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.EXISTING,
                            snapshot_id=entry.snapshot_id,
                            sequence_number=entry.sequence_number,
                            file_sequence_number=entry.file_sequence_number,
                            data_file=entry.data_file,
                        )
                    )
            kept.append(writer.to_manifest_file())
        return kept


def _staged_names(table: Table, staged: Table, files: TableFiles) -> tuple[str, ...]:
    """The names of the files the staged snapshots wrote, in the forms pyiceberg gives them
    (a UUID in each; never a directory, which may be a partition value)."""
    new = _staged_snapshots(table, staged)
    names = {key.rsplit("/", 1)[-1] for key in files.written_by(new)}
    return tuple(sorted(n for n in names if _WRITTEN_NAME.fullmatch(n)))


def _staged_snapshots(table: Table, staged: Table) -> list[Snapshot]:
    """The snapshots a staged commit adds to `table`."""
    base = {s.snapshot_id for s in table.metadata.snapshots}
    return [s for s in staged.metadata.snapshots if s.snapshot_id not in base]


def _records(table: Table) -> int:
    snapshot = table.current_snapshot()
    if snapshot is None:
        return 0
    total = snapshot.summary["total-records"] if snapshot.summary is not None else None
    return int(total) if total is not None else 0


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return bool(fs.get_file_info(path).type == pafs.FileType.File)


def _kind_of(relative: str) -> FileKind:
    name = relative.rsplit("/", 1)[-1]
    if name.endswith(".metadata.json"):
        return "metadata"
    if name.endswith(".avro"):
        return "manifest_list" if name.startswith("snap-") else "manifest"
    if name.endswith((".puffin", ".stats")):
        return "statistics"
    return "data"
