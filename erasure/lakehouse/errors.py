"""The errors of lakehouse erasure: a table that cannot be opened, erased or cleaned, and a
refusal a person must decide about.

Messages name tables, columns and counts; never a stored value (the person's email, phone or
id), nor the text of an engine's error about a row, which may quote one. A ref's name or a
path may spell a value (a tag named after the person, a partition directory): a refusal
carries them in `names` only (paths with every `col=value` segment as `col=…`), for the
caller to show or withhold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from erasure.errors import ErasureError, NotYet

RefusalReason = Literal[
    "refs_hold_subject",  # Iceberg: a branch or tag other than main holds their rows
    "refs_behind",  # Iceberg, after a rebuild: a ref points at an older snapshot
    "delete_files",  # Iceberg: delete files mask rows still in data files
    "deletion_vectors",  # Delta: deletion vectors mask rows still in data files
    "tombstones",  # Delta: the checkpoint still names their partition until retention passes
    "gc_disabled",  # Iceberg: gc.enabled=false, the table's files may be other tables' too
    "files_outside",  # a file holding them lives outside the table's own location
]


class LakehouseError(ErasureError):
    """An Iceberg or Delta table could not be opened, read, erased or cleaned."""


class LakehouseRefused(LakehouseError):
    """The erasure cannot be done alone: a tag, branch, deletion vector, delete file or
    retention setting keeps what a person must decide about. `reason` and `names` (refs, or
    paths with every partition value blanked) say which, as data; the message never names
    them."""

    def __init__(self, message: str, *, reason: RefusalReason, names: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.reason: RefusalReason = reason
        self.names = list(names)


class LakehouseBusy(LakehouseError, NotYet):
    """Another worker held the table (erasing it, expiring its history or searching it) for
    longer than this one waits in its task: this try changed nothing. A step that may wait is
    rescheduled (NotYet), holding no worker slot meanwhile."""
