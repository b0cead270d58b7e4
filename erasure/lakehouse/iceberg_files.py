"""The files of one Iceberg table as its metadata names them: those its retained snapshots use,
those any metadata file it can still reach ever named, and the locations it owns.

Every file is keyed as the table's file system names it (the location without its scheme).
The table owns its location and its `write.data.path` and `write.metadata.path`: only files
there are ever removed. A file elsewhere (`add_files` of another table's files, a migrated
table) is read, never removed. A file no reachable metadata names may be a concurrent
writer's, not yet committed (erasure.lakehouse.files.UNNAMED_MIN_AGE).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow.fs as pafs  # type: ignore[import-untyped, unused-ignore]
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFileContent, ManifestEntryStatus, ManifestFile
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from erasure.lakehouse.errors import LakehouseError
from erasure.lakehouse.evidence import FileKind
from erasure.lakehouse.files import Located

GC_ENABLED = "gc.enabled"
# Where a table writes besides its location (the object-storage and folder-storage paths
# are the deprecated names of the data path).
_OWNED_PATH_PROPERTIES = (
    TableProperties.WRITE_DATA_PATH,
    TableProperties.WRITE_METADATA_PATH,
    "write.object-storage.path",
    "write.folder-storage.path",
)


@dataclass
class TableFiles:
    """The files of `table` (as last read), for the erasure's removals and residue's search."""

    table: Table
    label: str
    _locations: dict[str, str] = field(default_factory=dict)  # key -> a location naming it

    @property
    def io(self) -> FileIO:
        return self.table.io

    def gc_enabled(self) -> bool:
        """False when the table says its files may be shared (`gc.enabled=false`)."""
        return self.table.properties.get(GC_ENABLED, "true").strip().lower() != "false"

    def key(self, location: str) -> str:
        """A location as the table's file system names it (no scheme)."""
        key = PyArrowFileIO.parse_location(location, self.io.properties)[2].rstrip("/")
        self._locations.setdefault(key, location)
        return key

    def filesystem(self, location: str) -> pafs.FileSystem:
        """The file system of `location`."""
        scheme, netloc, _ = PyArrowFileIO.parse_location(location, self.io.properties)
        if isinstance(self.io, PyArrowFileIO):
            return self.io.fs_by_scheme(scheme, netloc)
        return pafs.FileSystem.from_uri(location)[0]

    def filesystem_of(self, key: str) -> pafs.FileSystem:
        """The file system of a key this table named (a file, a root)."""
        return self.filesystem(self._locations.get(key, key))

    def located(self, key: str) -> Located:
        """The file at `key`, on its file system, shown relative to the table's location."""
        return Located(self.filesystem_of(key), key, self.shown(key))

    def root(self) -> str:
        """The key of the table's location."""
        return self.key(self.table.location())

    def roots(self) -> list[str]:
        """The locations the table owns (its location, data and metadata paths), as keys,
        none inside another."""
        keys = [self.root()]
        for name in _OWNED_PATH_PROPERTIES:
            path = self.table.properties.get(name)
            if path:
                keys.append(self.key(path))
        return [k for k in dict.fromkeys(keys) if not any(_inside(k, o) for o in keys if o != k)]

    def owns(self, key: str) -> bool:
        """Whether the file at `key` lives in a location the table owns."""
        return any(_inside(key, root) for root in self.roots())

    def shown(self, key: str) -> str:
        """`key` relative to the table's location, or whole when it lives elsewhere."""
        root = self.root()
        return key[len(root) + 1 :] if _inside(key, root) else key

    def previous_metadata(self) -> list[TableMetadata]:
        """The table's previous metadata files that can still be read, oldest first."""
        found = []
        for entry in self.table.metadata.metadata_log:
            previous = _read_metadata(self.io, entry.metadata_file)
            if previous is not None:
                found.append(previous)
        return found

    def retained(self) -> set[str]:
        """Every file a retained snapshot or the current metadata uses."""
        metadata = self.table.metadata
        used = set(self.of_snapshots(metadata.snapshots, strict=True))
        used.add(self.key(self.table.metadata_location))
        for statistics in [*metadata.statistics, *metadata.partition_statistics]:
            used.add(self.key(statistics.statistics_path))
        return used

    def named(self) -> dict[str, FileKind]:
        """Every file the current or a reachable previous metadata file names: the metadata
        files, and every snapshot's manifest list, manifests, data and delete files (removed
        entries included) and statistics."""
        current = self.table.metadata
        everything = [*self.previous_metadata(), current]
        found: dict[str, FileKind] = {self.key(self.table.metadata_location): "metadata"}
        for entry in current.metadata_log:
            found[self.key(entry.metadata_file)] = "metadata"
        snapshots: dict[int, Snapshot] = {}
        for metadata in everything:
            for snapshot in metadata.snapshots:
                snapshots.setdefault(snapshot.snapshot_id, snapshot)
            for statistics in [*metadata.statistics, *metadata.partition_statistics]:
                found[self.key(statistics.statistics_path)] = "statistics"
        found.update(self.of_snapshots(snapshots.values(), strict=False))
        return found

    def of_snapshot(self, snapshot: Snapshot) -> dict[str, FileKind]:
        """The manifest list, manifests and live data and delete files of one snapshot."""
        return self.of_snapshots([snapshot], strict=True)

    def of_snapshots(self, snapshots: Iterable[Snapshot], *, strict: bool) -> dict[str, FileKind]:
        """The manifest lists, manifests and live data and delete files of `snapshots`
        (`strict`: every one must be readable; else what is gone is skipped, with all entries
        of what is left, DELETED ones included)."""
        found: dict[str, FileKind] = {}
        read: set[str] = set()
        for snapshot in snapshots:
            found[self.key(snapshot.manifest_list)] = "manifest_list"
            try:
                manifests = snapshot.manifests(self.io)
            except (FileNotFoundError, OSError):
                if strict:
                    raise self._unreadable(snapshot.snapshot_id) from None
                continue
            for manifest in manifests:
                key = self.key(manifest.manifest_path)
                found[key] = "manifest"
                if key in read:
                    continue
                read.add(key)
                try:
                    entries = _entries(self.io, manifest, live_only=strict)
                except (FileNotFoundError, OSError):
                    if strict:
                        raise self._unreadable(snapshot.snapshot_id) from None
                    continue
                for path, content in entries:
                    found[self.key(path)] = "data" if content == DataFileContent.DATA else "delete"
        return found

    def written_by(self, snapshots: Iterable[Snapshot]) -> list[str]:
        """The files `snapshots` wrote themselves (their manifest lists, the manifests they
        added and the files those list as ADDED by them): what a staged commit put on disk."""
        ids = {s.snapshot_id for s in snapshots}
        written: list[str] = []
        for snapshot in snapshots:
            written.append(self.key(snapshot.manifest_list))
            for manifest in snapshot.manifests(self.io):
                if manifest.added_snapshot_id not in ids:
                    continue  # carried over from before
                written.append(self.key(manifest.manifest_path))
                written += [
                    self.key(entry.data_file.file_path)
                    for entry in manifest.fetch_manifest_entry(self.io, discard_deleted=True)
                    if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id in ids
                ]
        return written

    def _unreadable(self, snapshot_id: int) -> LakehouseError:
        return LakehouseError(
            f"{self.label}: a manifest of retained snapshot {snapshot_id} cannot be read, so "
            "what it references is unknown; nothing was removed. Repair the table's files, "
            "then retry"
        )


def _inside(key: str, root: str) -> bool:
    return key == root or key.startswith(root.rstrip("/") + "/")


def _entries(
    io: FileIO, manifest: ManifestFile, *, live_only: bool
) -> list[tuple[str, DataFileContent]]:
    return [
        (entry.data_file.file_path, entry.data_file.content)
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=live_only)
    ]


def _read_metadata(io: FileIO, location: str) -> TableMetadata | None:
    try:
        return FromInputFile.table_metadata(io.new_input(location))
    except Exception:  # gone (deleted after commit) or unreadable: nothing to learn from it
        return None
