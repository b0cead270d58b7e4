"""What a lakehouse erasure did and what a search found: counts, names and relative paths only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from erasure.model import Evidence

# The kinds `files_removed` counts by. Iceberg: data, delete (position/equality delete files),
# manifest, manifest_list, statistics (puffin, partition statistics), metadata (an old
# metadata file found holding the subject). Delta: data, change_data, log, checkpoint.
FileKind = Literal[
    "data",
    "delete",
    "manifest",
    "manifest_list",
    "statistics",
    "metadata",
    "change_data",
    "log",
    "checkpoint",
    "directory",
    "other",
]

# Which snapshots an erasure expired (see HistoryErasure).
Expiry = Literal["holding_subject", "all_older"]


@dataclass(frozen=True)
class DeletedRows:
    """What the delete of the subject's rows did, or is about to commit (`before_commit`)."""

    rows_before: int
    rows_deleted: int
    # Iceberg: a manifest-only snapshot dropped the manifests listing the removed files.
    manifests_dropped: bool = False
    # Iceberg, before the commit: the names of the files the delete staged (see HistoryErasure).
    staged: tuple[str, ...] = ()


class HistoryErasure(Evidence):
    """What `erase` or `expire_history` did to one table, for the completion record.

    `before_commit` is given this evidence of the delete about to be committed (`committed`
    False, history counts still zero: if that commit fails, nothing was deleted); the
    returned one is complete (`committed` True). `delete_mode` is what the table asked for
    (Iceberg's `write.delete.mode`; Delta's "deletion-vectors" when its protocol enables
    them); the delete is copy-on-write whatever it asked, and `copy_on_write` says it was
    checked.

    `expiry` says which snapshots went: "holding_subject" (Iceberg's erase: exactly those
    holding the subject's rows or referencing a file that holds them; `snapshots_kept` the
    others, which never held them) or "all_older" (every snapshot but the current one and the
    refs' heads: an Iceberg table's after a rebuild; a Delta table's always, since a version
    goes only by removing the log before a checkpoint, which takes every version before it).
    """

    format: Literal["iceberg", "delta"]
    table: str
    rows_before: int
    rows_deleted: int
    rows_after: int
    snapshots_before: int
    # The erasure's own commits (the delete's snapshots, Delta's vacuum and checkpoint
    # versions): before + written - expired = after.
    snapshots_written: int = 0
    snapshots_after: int
    snapshots_expired: int
    files_removed: dict[str, int]
    refs_kept: list[str]
    copy_on_write: bool
    delete_mode: str
    already_done: bool
    effective_at: datetime  # UTC: when the last file holding the rows was removed
    # True when returned after the erasure's commits; False when logged before the delete's
    # commit, which may yet fail (a retry must not take such evidence for a delete done).
    committed: bool = False
    expiry: Expiry = "all_older"
    snapshots_kept: int = 0  # snapshots other than the refs' heads left: they never held them
    # Files holding the subject that no metadata or log entry ever named (a writer's output
    # not yet committed, or an orphan): left until older than files.UNNAMED_MIN_AGE, so a
    # concurrent writer's commit cannot lose them; `residue` lists them, so verify fails.
    files_unnamed_left: int = 0
    # Logged before the commit only: the names (no directory; engine-written, a UUID in each)
    # of the files the delete staged. A retry after its process died before the commit
    # removes those no snapshot uses: no metadata names them, and they may keep the subject.
    staged: list[str] = Field(default_factory=list)


class Residue(BaseModel):
    """What an independent search of one table found: every retained snapshot read, every
    file under the table's own locations and every file a retained snapshot references
    wherever it lives, read by its format (or listed as unverifiable)."""

    model_config = ConfigDict(frozen=True)

    format: Literal["iceberg", "delta"]
    table: str
    snapshots_checked: int
    rows_by_snapshot: dict[str, int]  # snapshot id or version -> matching rows (non-zero only)
    snapshots_unreadable: list[str]  # in the metadata, but their rows could not be read
    files_checked: int
    # Relative to the table root (a file elsewhere: its whole path), every `col=value`
    # segment shown as `col=…`.
    files_holding: list[str]
    files_unreadable: list[str]  # as files_holding: a format this search cannot read
    refs: list[str]  # branches and tags (not main) whose snapshot holds the subject

    @computed_field  # type: ignore[prop-decorator]
    @property
    def clean(self) -> bool:
        """Nothing holds the subject, nothing was unreadable, and something was checked."""
        return (
            self.snapshots_checked > 0
            and not self.rows_by_snapshot
            and not self.snapshots_unreadable
            and not self.files_holding
            and not self.files_unreadable
            and not self.refs
        )
