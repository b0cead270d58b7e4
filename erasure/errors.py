"""One root exception and its narrow subclasses.

Messages say what was wrong and what to do about it, and never contain a raw subject
identifier: callers pass types, hashes, dataset names and counts, never values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError


class ErasureError(Exception):
    """Root of every error this package raises on purpose."""


class StepError(ErasureError):
    """A step cannot run at all; the message says what must happen first."""


class NotYet(StepError):
    """A step must wait for others of the same run (lineage or foreign-key order), or for
    another worker's hold on a table: retry soon."""


class ConfigError(ErasureError):
    """Settings are missing or inconsistent."""


class CatalogError(ErasureError):
    """The catalog file is invalid; the message names file, dataset and field."""


class LineageError(ErasureError):
    """Lineage input (SQL, OpenLineage events) cannot be read at all."""


class SubjectError(ErasureError):
    """A subject identifier is malformed or of an unknown type (the value is never echoed)."""


class RequestError(ErasureError):
    """An erasure request is invalid, unknown, or asked to do what its state forbids."""


class WarehouseError(ErasureError):
    """A warehouse query failed: unreachable connection, missing table or column."""


class VaultError(ErasureError):
    """Vault/OpenBao refused, failed or could not be reached; the message names the address."""


class KeyNotFoundError(VaultError):
    """The subject key does not exist (never created, or already shredded)."""


class ShredError(VaultError):
    """A key could not be destroyed, or its destruction could not be proven."""


class DecryptionError(ErasureError):
    """A record cannot be decrypted: wrong key, key shredded, or data tampered with."""


class SuppressionError(ErasureError):
    """The suppression list could not be read or written."""


class StoreError(ErasureError):
    """The erasure store (its own database) failed or is not migrated."""


class EraseRefused(ErasureError):
    """The dataset must not be erased row by row: shared (rule 2a), immutable, or no root."""


class EraseFailed(ErasureError):
    """The delete failed or left the subject's rows behind; it was rolled back."""


class RebuildFailed(ErasureError):
    """A rebuild could not run or did not succeed; the previous artefact is left in place."""


class VerificationFailed(ErasureError):
    """The subject is still found somewhere the plan erased or rebuilt; nothing is complete."""

    def __init__(self, message: str, recounts: Sequence[Any]) -> None:
        super().__init__(message)
        self.recounts = recounts


@dataclass(frozen=True)
class Invalid:
    """One problem of a pydantic ValidationError, without the input that caused it."""

    loc: tuple[int | str, ...]
    kind: str  # pydantic's error type: missing, extra_forbidden, value_error, ...
    message: str

    @property
    def where(self) -> str:
        return ".".join(str(part) for part in self.loc)


def invalid_fields(exc: ValidationError) -> list[Invalid]:
    """The problems of `exc`: where and what, never the input given (it may be a subject
    identifier or a secret). Every message about invalid data is built from these."""
    return [
        Invalid(
            loc=tuple(err.get("loc") or ()),
            kind=str(err.get("type", "")),
            message=str(err.get("msg", "invalid")).removeprefix("Value error, "),
        )
        for err in exc.errors(include_input=False, include_url=False)
    ]


def describe_invalid(exc: ValidationError, *, locations: bool = False) -> str:
    """A pydantic ValidationError as one line of clauses, never quoting the input given."""
    return "; ".join(
        f"{p.where}: {p.message}" if locations and p.loc else p.message for p in invalid_fields(exc)
    )


# Database failures, described without repeating what the database said about a row.


def describe_failure(exc: BaseException) -> str:
    """What a statement's failure was, never what the database said about the row.

    The driver's error class and its code (psycopg's SQLSTATE, sqlite3's extended result
    code, e.g. SQLITE_CONSTRAINT_FOREIGNKEY), and for psycopg the table, column and constraint
    it names; the message text itself may quote a key or a value and is dropped. The one
    describer of failed statements (actions, the warehouse, CRM ingest).
    """
    orig = getattr(exc, "orig", None)
    failed = orig if orig is not None else exc
    code = (
        getattr(failed, "sqlstate", None)
        or getattr(failed, "pgcode", None)
        or getattr(failed, "sqlite_errorname", None)
    )
    parts = [type(failed).__name__ + (f" {code}" if code else "")]
    diag = getattr(failed, "diag", None)
    for label in ("table_name", "column_name", "constraint_name"):
        value = getattr(diag, label, None) if diag is not None else None
        if value:
            parts.append(f"{label.split('_')[0]} {value}")
    return ", ".join(parts)


def driver_message(exc: BaseException) -> str:
    """Why a connection (or a schema read) failed: the first line of the driver's message.

    No statement with values ran, so the text names only the server, database or table;
    the one place the message is shown.
    """
    text = str(getattr(exc, "orig", None) or exc) or type(exc).__name__
    return text.strip().splitlines()[0][:300]
