"""Delta tables through delta-rs (deltalake): erase a person's rows from the current version and
from every version, log entry, checkpoint and change-data file that kept them.

`erase` runs small resumable steps, each checking its own precondition:

1. refuse when a live file carries a deletion vector: the rows it masks (perhaps theirs,
   deleted by another engine) are still in the file;
2. `delete_rows`: a MERGE of the located values (an Arrow table) that deletes every matching
   row. No value is ever written into SQL text: delta-rs records a DELETE's predicate in the
   commit's `operationParameters`, i.e. in the log, and a predicate string needs escaping
   that DataFusion's parser would have to agree with. delta-rs rewrites the affected files
   (copy-on-write), also on a table whose protocol enables deletion vectors; that is checked;
   Before it, refuse when a file holding the subject is named by its absolute path (a
   shallow clone's, another table's): it is never removed;
3. `vacuum`: delta-rs's vacuum with no retention, only when a removed file is still there
   (it commits VACUUM START and END; its lite mode leaves `_change_data/` alone and does not
   sweep files no commit named, so a concurrent writer's files are safe);
4. `checkpoint`: a checkpoint at the current version;
5. `remove_log_before_checkpoint`: the files named by the commits and checkpoints before it
   that the current version does not use (data, `_change_data/`), then those commits and
   checkpoints: their `add.stats` keep the removed files' min and max values, which may be
   the subject's. Older versions then cannot be loaded: that is the erasure. The commit at
   the checkpoint's version stays: delta-rs cannot write the next version without it;
6. `remove_garbage_holding`: files no retained log entry uses in which the subject is found:
   those a log entry named; a file none named (a concurrent writer's, not committed yet)
   only once older than UNNAMED_MIN_AGE, and until then left for `residue` to report;
7. `check_log_retains_nothing`: refuse when the log the table needs still names them (the
   tombstones of a table partitioned by a subject column, kept until their retention ends).

Unlike Iceberg's, a Delta version cannot be expired alone: versions go only by removing the
log before a checkpoint, which takes every version before it. So every older version goes,
whether it held the subject or not (the evidence says `expiry` "all_older"). Only files under
the table root, named by relative paths, are ever removed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import unquote, urlparse

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.fs as pafs  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from deltalake.fs import DeltaStorageHandler

from erasure.lakehouse.errors import LakehouseError, LakehouseRefused
from erasure.lakehouse.evidence import DeletedRows, FileKind, HistoryErasure, Residue
from erasure.lakehouse.files import (
    UNNAMED_MIN_AGE,
    Located,
    directories_naming,
    kinds_count,
    list_files,
    older_than,
    remove_empty_directories_naming,
    search_file,
    search_located,
    search_path,
)
from erasure.lakehouse.probe import Probe, redact
from erasure.lakehouse.rows import (
    matchable,
    matching_rows,
    rows_holding,
    typed_values,
    value_counts,
)
from erasure.lakehouse.table import Match, SubjectValues

LOG_DIR = "_delta_log"
_LOG_FILE = re.compile(
    r"^(?P<version>\d{20})(?:\.(?P<end>\d{20}))?\.(?P<kind>json|crc|compacted\.json|checkpoint"
    r"(?:\.\d+\.\d+|\.[0-9a-fA-F-]{36})?\.(?:parquet|json))$"
)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_SOURCE_ALIAS = "subject"
_TARGET_ALIAS = "target"


@dataclass(frozen=True)
class LogFile:
    """One file of `_delta_log/`: a commit, a checkpoint (or part), a compaction or a checksum."""

    relative: str
    version: int  # a compaction: its last version
    kind: FileKind  # "log" (commit, compaction, checksum) or "checkpoint"
    commit: bool  # a version's own commit JSON


class DeltaLakeTable:
    """One Delta table under a configured root, read and written through delta-rs."""

    format = "delta"

    def __init__(
        self, uri: str, name: str, storage_options: Mapping[str, str] | None = None
    ) -> None:
        self.uri = uri
        self.label = f"delta {name}"
        self._options = dict(storage_options or {})
        self._table = self._open()
        self._fs = _filesystem(uri, self._options)

    def _open(self, version: int | None = None) -> DeltaTable:
        try:
            return DeltaTable(self.uri, version=version, storage_options=self._options or None)
        except TableNotFoundError:
            at = f" at version {version}" if version is not None else ""
            raise LakehouseError(
                f"{self.label}: no Delta table{at} (no readable _delta_log); check the table's "
                "path under the configured root"
            ) from None

    @property
    def table(self) -> DeltaTable:
        """The delta-rs table, as last read."""
        return self._table

    def physical_id(self) -> str:
        return str(self._table.metadata().id)

    def refresh(self) -> DeltaTable:
        """The table at its latest version."""
        self._table = self._open()
        return self._table

    # Reading ----------------------------------------------------------------------------

    def _schema(self, table: DeltaTable) -> pa.Schema:
        return pa.schema(table.schema().to_arrow())

    def _batches(self, table: DeltaTable, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
        # scan(), not to_pyarrow_dataset(): the dataset refuses any table whose protocol names
        # the deletionVectors reader feature, and ignores the vectors of files that have one.
        reader = pa.RecordBatchReader.from_stream(table.scan(columns=list(columns)))
        yield from reader

    def columns(self) -> list[str]:
        """The top-level columns of the current schema."""
        return list(self._schema(self._table).names)

    def matchable(self) -> dict[str, bool]:
        """Per top-level column: whether it holds text or whole numbers (what a `Match`
        judges); a binary, nested or other column holds values no identifier is compared to."""
        return {field.name: matchable(field.type) for field in self._schema(self._table)}

    def distinct(self, columns: Sequence[str]) -> dict[str, dict[object, int]]:
        """Per column, each value of the current version and its rows (a projected scan)."""
        table = self.refresh()
        self._require_columns(table, columns)
        if not columns:
            return {}
        return value_counts(self._batches(table, columns), columns)

    def count(self, values: SubjectValues) -> int:
        """Current rows where any named column holds one of its values."""
        table = self.refresh()
        typed = typed_values(self.label, self._schema(table), values)
        return rows_holding(self._batches(table, list(typed)), typed) if typed else 0

    def _require_columns(self, table: DeltaTable, columns: Sequence[str]) -> None:
        known = self._schema(table).names
        missing = [c for c in columns if c not in known]
        if missing:
            raise LakehouseError(
                f"{self.label}: no column {', '.join(map(repr, missing))} in the current schema "
                f"(columns: {', '.join(known)}); re-run locate against the table"
            )

    def refs_holding(self, match: Match, columns: Sequence[str]) -> list[str]:
        """Delta has no branches or tags: always empty."""
        return []

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
        """Delete the subject's rows copy-on-write, then every older version and every file
        that held them; resumable, and a no-op (already_done) on a clean table. delta-rs
        writes and commits in one call, so no try logs what it staged (`staged_before` is
        empty). `search`: what the files are searched for, `values` by default."""
        table = self.refresh()
        probe = Probe.build(match, columns, values if search is None else search)
        self.check_deletion_vectors(probe)
        self.check_files_outside(probe)
        versions_before = self._versions()
        delete_mode = self._delete_mode(table)

        def evidence(
            deleted: DeletedRows,
            removed: list[FileKind],
            expired: int,
            *,
            committed: bool = True,
            unnamed_left: int = 0,
        ) -> HistoryErasure:
            versions = self._versions()
            # A file of theirs left for a later retry (unnamed_left): not done either.
            changed = bool(deleted.rows_deleted or removed or expired or unnamed_left)
            return HistoryErasure(
                format="delta",
                table=self.label,
                rows_before=deleted.rows_before,
                rows_deleted=deleted.rows_deleted,
                rows_after=0,
                snapshots_before=len(versions_before),
                snapshots_written=max(0, len(versions) + expired - len(versions_before)),
                snapshots_after=len(versions),
                snapshots_expired=expired,
                files_removed=kinds_count(removed),
                refs_kept=[],
                copy_on_write=True,
                delete_mode=delete_mode,
                already_done=not changed,
                effective_at=datetime.now(UTC),
                committed=committed,
                expiry="all_older",
                files_unnamed_left=unnamed_left,
            )

        def log(deleted: DeletedRows) -> None:
            if before_commit is not None:
                before_commit(evidence(deleted, [], 0, committed=False))

        deleted = self.delete_rows(values, before_commit=log)
        rows_after = self.count(values)
        if rows_after:
            raise LakehouseError(
                f"{self.label}: {rows_after} of the subject's row(s) are in the current version "
                "after the delete (a concurrent writer added them back); no history was "
                "removed. Stop the writer and retry"
            )
        if self._vectors(self.refresh()):
            raise LakehouseError(
                f"{self.label}: the delete wrote deletion vectors instead of rewriting files; "
                "the rows are still in the files. Pin a deltalake that deletes copy-on-write"
            )
        removed = self.vacuum()
        self.checkpoint(probe)
        seen = versions_before | self._versions()
        removed += self.remove_log_before_checkpoint()
        garbage, unnamed_left = self.remove_garbage_holding(probe)
        removed += garbage
        self.check_log_retains_nothing(probe)
        return evidence(deleted, removed, len(seen - self._versions()), unnamed_left=unnamed_left)

    def _delete_mode(self, table: DeltaTable) -> str:
        features = table.protocol().writer_features or []
        return "deletion-vectors" if "deletionVectors" in features else "copy-on-write"

    def _vectors(self, table: DeltaTable) -> list[str]:
        """The live files that carry a deletion vector, relative to the table root."""
        if self._delete_mode(table) != "deletion-vectors":
            return []
        found = pa.table(table.deletion_vectors()).column("filepath").to_pylist()
        return sorted(self._relative(str(path)) for path in found)

    def _relative(self, path: str) -> str:
        root = self._table.table_uri.rstrip("/") + "/"
        return unquote(path[len(root) :] if path.startswith(root) else path)

    def check_deletion_vectors(self, probe: Probe | None = None) -> None:
        """Step 1: refuse when a live file carries a deletion vector."""
        files = self._vectors(self.refresh())
        if files:
            raise LakehouseRefused(
                f"{self.label}: {len(files)} file(s) carry deletion vectors (see the refusal's "
                "names); the rows they mask are still in the files and delta-rs cannot purge "
                "them. Purge them with the engine that wrote them (Spark: REORG TABLE ... "
                "APPLY (PURGE)), then retry",
                reason="deletion_vectors",
                names=[redact(f, probe) for f in files],
            )

    def check_files_outside(self, probe: Probe) -> None:
        """Refuse when a file the log names by an absolute path (a shallow clone's, another
        table's) holds the subject: it is never removed, and rewriting the rows would leave
        it there."""
        holding = [
            path
            for path in sorted(self._named_outside())
            if search_path(*_outside(path, self._options), probe, path) == "holds"
        ]
        if holding:
            raise LakehouseRefused(
                f"{self.label}: {len(holding)} file(s) holding the subject are named by an "
                "absolute path outside the table (a shallow clone's source; see the refusal's "
                "names): this job removes only the table's own files. Erase them in the table "
                "they belong to (or have the owner deep-clone this one), then retry",
                reason="files_outside",
                names=[redact(path, probe) for path in holding],
            )

    def _named_outside(self) -> set[str]:
        """The files the log names by an absolute path."""
        named: set[str] = set()
        for log_file in self._log_files():
            named |= {p for p in self._named_by(log_file) if is_outside(p)}
        return named

    def delete_rows(
        self,
        values: SubjectValues,
        *,
        before_commit: Callable[[DeletedRows], None] | None = None,
    ) -> DeletedRows:
        """Step 2: delete every row holding a located value, by a MERGE of those values."""
        table = self.refresh()
        typed = typed_values(self.label, self._schema(table), values)
        rows_before = rows_holding(self._batches(table, list(typed)), typed) if typed else 0
        if not rows_before:
            return DeletedRows(0, 0)
        source, predicate = merge_source(typed)
        if before_commit is not None:
            before_commit(DeletedRows(rows_before, rows_before))
        try:
            metrics = (
                table.merge(
                    source,
                    predicate=predicate,
                    source_alias=_SOURCE_ALIAS,
                    target_alias=_TARGET_ALIAS,
                )
                .when_matched_delete()
                .execute()
            )
        except Exception as exc:
            # `from None`: an engine's message about a row may quote it.
            raise LakehouseError(
                f"{self.label}: the delete failed ({type(exc).__name__}); nothing was "
                "committed. Check the table's storage and retry"
            ) from None
        self.refresh()
        return DeletedRows(rows_before, int(metrics.get("num_target_rows_deleted", rows_before)))

    def vacuum(self) -> list[FileKind]:
        """Step 3: vacuum removed files with no retention, when one is still on storage."""
        table = self.refresh()
        listed = table.vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False)
        present = [path for path in listed if not is_outside(path) and self._exists(path)]
        if not present:
            return []
        table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
        self.refresh()
        return [_data_kind(path) for path in present if not self._exists(path)]

    def checkpoint(self, probe: Probe | None = None) -> bool:
        """Step 4: a checkpoint at the current version, unless there is one (that does not hold
        the subject, given a `probe`); whether one was written."""
        table = self.refresh()
        latest = self._latest_checkpoint()
        if latest == table.version() and not (probe and self._log_holding(probe, latest)):
            return False
        table.create_checkpoint()
        return True

    def _log_holding(self, probe: Probe, since: int | None) -> list[str]:
        """The log files from version `since` on in which the subject is found, relative."""
        return [
            f.relative
            for f in self._log_files()
            if (since is None or f.version >= since)
            and search_file(self._fs, "", f.relative, probe) == "holds"
        ]

    def check_log_retains_nothing(self, probe: Probe) -> None:
        """Refuse when the log the table needs still names the subject: a checkpoint keeps the
        paths of removed files (tombstones) until `delta.deletedFileRetentionDuration` has
        passed, and a partition directory named after a subject column's value spells it."""
        holding = self._log_holding(probe, self._latest_checkpoint())
        if holding:
            shown = [redact(f, probe) for f in holding]
            raise LakehouseRefused(
                f"{self.label}: the rows and history are gone, but {len(holding)} log file(s) "
                "the table needs still name the subject (see the refusal's names): removed "
                "files of a table partitioned by a subject column keep their paths as tombstones "
                "until delta.deletedFileRetentionDuration (default 7 days) has passed. Erase "
                "again after that (it writes a checkpoint without them), or have the table's "
                "owner lower that retention",
                reason="tombstones",
                names=shown,
            )

    def remove_log_before_checkpoint(self) -> list[FileKind]:
        """Step 5: remove what only the log before the latest checkpoint names, then that log."""
        checkpoint = self._latest_checkpoint()
        if checkpoint is None:
            return []
        older = [f for f in self._log_files() if f.version < checkpoint]
        if not older:
            return []
        used = self._used_files(checkpoint)
        named: set[str] = set()
        for log_file in older:
            named |= self._named_by(log_file)
        removed: list[FileKind] = []
        for path in sorted(named - used):
            if not is_outside(path) and self._exists(path):
                self._fs.delete_file(path)
                removed.append(_data_kind(path))
        for log_file in sorted(older, key=lambda f: (f.version, f.relative)):
            if self._exists(log_file.relative):
                self._fs.delete_file(log_file.relative)
                removed.append(log_file.kind)
        return removed

    def remove_garbage_holding(self, probe: Probe) -> tuple[list[FileKind], int]:
        """Step 6: remove the files no retained log entry uses in which the subject is found,
        and empty directories named after them; a file no log entry names only once older
        than UNNAMED_MIN_AGE. The kinds removed, and how many such files were left."""
        checkpoint = self._latest_checkpoint()
        used = self._used_files(checkpoint)
        named: set[str] = set()
        for log_file in self._log_files():
            named |= self._named_by(log_file)
        removed: list[FileKind] = []
        left = 0
        for relative in list_files(self._fs, ""):
            if relative in used or relative.startswith(LOG_DIR + "/"):
                continue  # the log at and after the checkpoint is the table
            if search_file(self._fs, "", relative, probe) != "holds":
                continue
            if relative not in named and not older_than(self._fs, relative, UNNAMED_MIN_AGE):
                left += 1  # perhaps a concurrent writer's, not committed yet
                continue
            self._fs.delete_file(relative)
            removed.append(_data_kind(relative))
        removed += ["directory"] * remove_empty_directories_naming(self._fs, "", probe)
        return removed, left

    def expire_history(self) -> HistoryErasure:
        """Keep only the current version (after a rebuild overwrote the table) and remove
        every file it does not use."""
        before = self._versions()
        removed = self.vacuum()
        self.checkpoint()
        seen = before | self._versions()
        removed += self.remove_log_before_checkpoint()
        after = self._versions()
        return HistoryErasure(
            format="delta",
            table=self.label,
            rows_before=0,
            rows_deleted=0,
            rows_after=0,
            snapshots_before=len(before),
            snapshots_written=len(seen - before),
            snapshots_after=len(after),
            snapshots_expired=len(seen - after),
            files_removed=kinds_count(removed),
            refs_kept=[],
            copy_on_write=True,
            delete_mode=self._delete_mode(self._table),
            already_done=not removed and not (seen - after),
            effective_at=datetime.now(UTC),
            committed=True,
        )

    # The log ----------------------------------------------------------------------------

    def _exists(self, relative: str) -> bool:
        return bool(self._fs.get_file_info(relative).type == pafs.FileType.File)

    def _log_files(self) -> list[LogFile]:
        found = []
        for relative in list_files(self._fs, LOG_DIR):
            name = relative.rsplit("/", 1)[-1]
            parsed = _LOG_FILE.match(name)
            if parsed is None:
                continue
            kind = parsed["kind"]
            version = int(parsed["end"] or parsed["version"])
            found.append(
                LogFile(
                    relative=f"{LOG_DIR}/{relative}",
                    version=version,
                    kind="checkpoint" if kind.startswith("checkpoint") else "log",
                    commit=kind == "json",
                )
            )
        return found

    def _versions(self) -> set[int]:
        """The versions the log still names (a commit or a checkpoint)."""
        return {f.version for f in self._log_files() if f.commit or f.kind == "checkpoint"}

    def _latest_checkpoint(self) -> int | None:
        versions = [f.version for f in self._log_files() if f.kind == "checkpoint"]
        return max(versions) if versions else None

    def _used_files(self, checkpoint: int | None) -> set[str]:
        """The files the current version reads, and the change data of commits kept."""
        table = self.refresh()
        used = {
            unquote(str(p)) for p in pa.table(table.get_add_actions()).column("path").to_pylist()
        }
        for log_file in self._log_files():
            if log_file.commit and (checkpoint is None or log_file.version >= checkpoint):
                used |= {p for p in self._named_by(log_file) if p.startswith("_change_data/")}
        return used

    def _named_by(self, log_file: LogFile) -> set[str]:
        """The data and change-data files a commit or checkpoint names (add, remove, cdc)."""
        named: set[str] = set()
        if log_file.relative.endswith(".parquet"):
            with self._fs.open_input_file(log_file.relative) as handle:
                parquet = pq.ParquetFile(handle)
                wanted = [c for c in ("add", "remove", "cdc") if c in parquet.schema_arrow.names]
                table = parquet.read(columns=wanted)
            for column in wanted:
                for action in table.column(column).to_pylist():
                    if action and action.get("path"):
                        named.add(_storage_path(action["path"]))
            return named
        if not log_file.relative.endswith(".json"):
            return named
        with self._fs.open_input_stream(log_file.relative) as stream:
            text = stream.read().decode("utf-8")
        for line in text.splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            for key in ("add", "remove", "cdc"):
                if isinstance(action.get(key), dict) and action[key].get("path"):
                    named.add(_storage_path(action[key]["path"]))
        return named

    # Proving ----------------------------------------------------------------------------

    def residue(self, match: Match, columns: Sequence[str], values: SubjectValues) -> Residue:
        """Read every version the log can still load, every file under the table root and
        every file the log names by an absolute path, and report where the subject is still
        found; shares no bookkeeping with `erase`."""
        probe = Probe.build(match, columns, values)
        checked, by_version, unreadable_versions = 0, {}, []
        for version in sorted(self._versions()):
            try:
                table = DeltaTable(self.uri, version=version, storage_options=self._options or None)
            except Exception:
                continue  # the log no longer reconstructs it: gone
            try:
                known = set(self._schema(table).names)
                present = [c for c in columns if c in known]
                rows = (
                    matching_rows(self._batches(table, present), match, present) if present else 0
                )
            except Exception:
                unreadable_versions.append(str(version))
                continue
            checked += 1
            if rows:
                by_version[str(version)] = rows
        located = [Located(self._fs, r, r) for r in list_files(self._fs, "")]
        located += [Located(*_outside(p, self._options), p) for p in sorted(self._named_outside())]
        files_checked, holding, unreadable = search_located(located, probe)
        holding = directories_naming(self._fs, "", probe) + holding
        return Residue(
            format="delta",
            table=self.label,
            snapshots_checked=checked,
            rows_by_snapshot=by_version,
            snapshots_unreadable=unreadable_versions,
            files_checked=files_checked,
            files_holding=[redact(f, probe) for f in holding],
            files_unreadable=[redact(f, probe) for f in unreadable],
            refs=[],
        )


def _filesystem(uri: str, options: Mapping[str, str]) -> pafs.FileSystem:
    """The table's files, by paths relative to its root: a local tree as the operating system
    has it (delta-rs's object store handler cannot remove an empty directory), any other
    store through delta-rs, with the table's storage options."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file") and not parsed.netloc:
        return pafs.SubTreeFileSystem(parsed.path or uri, pafs.LocalFileSystem())
    return pafs.PyFileSystem(DeltaStorageHandler(uri, dict(options) or None))


def is_outside(path: str) -> bool:
    """Whether the log names a file by an absolute path or URI (a shallow clone's source),
    not relative to the table root."""
    return path.startswith("/") or _SCHEME.match(path) is not None


def _outside(path: str, options: Mapping[str, str]) -> tuple[pafs.FileSystem, str]:
    """The file system of a file named by an absolute path (already percent-decoded, as
    `_storage_path` gives it), and its path there."""
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return pafs.LocalFileSystem(), parsed.path if parsed.scheme else path
    parent, _, name = path.rpartition("/")
    return pafs.PyFileSystem(DeltaStorageHandler(parent, dict(options) or None)), name


def quote_identifier(column: str) -> str:
    """A column name as a DataFusion SQL identifier (names are not values, yet are quoted)."""
    return '"' + column.replace('"', '""') + '"'


def merge_source(typed: Mapping[str, pa.Array]) -> tuple[pa.Table, str]:
    """The MERGE source (one row per located value, its column's cell set, the others null)
    and the join predicate, which names columns only."""
    total = sum(len(array) for array in typed.values())
    columns, terms, offset = {}, [], 0
    for index, (column, array) in enumerate(typed.items()):
        name = f"v{index}"
        after = total - offset - len(array)
        columns[name] = pa.concat_arrays(
            [pa.nulls(offset, array.type), array, pa.nulls(after, array.type)]
        )
        terms.append(f"{_TARGET_ALIAS}.{quote_identifier(column)} = {_SOURCE_ALIAS}.{name}")
        offset += len(array)
    return pa.table(columns), " OR ".join(terms)


def _storage_path(logged: str) -> str:
    """A path as the log writes it (URI-encoded, relative) as storage names it."""
    return unquote(logged)


def _data_kind(relative: str) -> FileKind:
    if relative.startswith("_change_data/"):
        return "change_data"
    if relative.startswith(LOG_DIR + "/"):
        return "checkpoint" if ".checkpoint." in relative else "log"
    return "data"
