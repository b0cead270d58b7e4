"""The chain head published outside the store: an anchor its owner cannot rewrite.

The store's owner can drop the append-only triggers, cut the tail and rewind the head, or wipe
the store: the chain then still verifies on its own. So after every append the ledger
publishes the new head (seq, record_hash, and that record's signature) as a new version of a
Vault KV v2 secret, `<kv mount>/anchors/chain-head`. Every component's policy denies delete,
destroy and undelete there and the secret keeps every version, so the history of heads is out
of the store owner's reach; `erasure audit verify` compares the chain with every retained
version (`erasure.audit.chain`): a wiped store, a cut tail, a re-signed record or a rewound
anchor is a problem, without the auditor having kept anything.

Publishing is idempotent and never moves back: a board already at or past a head leaves it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Protocol

import hvac
import hvac.exceptions
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from erasure.errors import ErasureError, VaultError
from erasure.keys.vault import address_of, is_not_found, vault_errors

ANCHOR_PATH = "anchors/chain-head"
# Versions of the anchor Vault keeps: one per completion-record append. KV v2 has no
# "unlimited" (0 means the mount's default, 10, and older heads would be pruned silently), so a
# number no deployment reaches in years; the operator policy accepts only this value.
ANCHOR_MAX_VERSIONS = 1_000_000
_PUBLISH_ATTEMPTS = 5  # compare-and-set retries when two appenders publish at once
_HEX64 = r"^[0-9a-f]{64}$"


class AnchorError(ErasureError):
    """The anchor could not be published or read."""


class ChainAnchor(BaseModel):
    """One published chain head; `version` is its number on the board, once read back."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int = Field(ge=1)
    record_hash: str = Field(pattern=_HEX64)
    signature: str = Field(min_length=1, max_length=512)
    signing_key_version: int = Field(ge=1)
    published_at: datetime
    version: int | None = Field(default=None, exclude=True)

    def describe(self) -> str:
        where = f"version {self.version}, " if self.version is not None else ""
        return f"anchor ({where}published {self.published_at:%Y-%m-%d %H:%M:%S} UTC)"


class AnchorHistory(BaseModel):
    """Every version a board holds, oldest first, and the versions that are not readable."""

    location: str
    anchors: list[ChainAnchor]
    # One line per version that was deleted, destroyed or pruned: each one is tampering.
    missing: list[str] = Field(default_factory=list)

    @property
    def newest(self) -> ChainAnchor | None:
        return self.anchors[-1] if self.anchors else None


class AnchorBoard(Protocol):
    """Where chain heads are published (VaultAnchorBoard; unit tests keep one in memory)."""

    @property
    def location(self) -> str: ...

    def publish(self, anchor: ChainAnchor) -> bool:
        """Publish `anchor` unless the board already holds that seq or a later one; whether
        it was written."""
        ...

    def history(self) -> AnchorHistory:
        """Every published version, oldest first."""
        ...


class VaultAnchorBoard:
    """A KV v2 secret whose versions are the published heads."""

    def __init__(self, client: hvac.Client, mount: str, path: str = ANCHOR_PATH) -> None:
        self._client = client
        self._kv = client.secrets.kv.v2
        self._mount = mount
        self._path = path

    @property
    def location(self) -> str:
        return f"{self._mount}/{self._path}"

    def keep_every_version(self) -> bool:
        """Make Vault keep every version (`erasure keys init`, as the operator); whether this
        call changed the setting."""
        meta = self._metadata()
        if meta is not None and int(meta.get("max_versions") or 0) == ANCHOR_MAX_VERSIONS:
            return False
        with vault_errors(address_of(self._client), f"keep every version of {self.location}"):
            # Sent as text: the operator policy's allowed_parameters compare it as a string.
            self._kv.update_metadata(
                path=self._path,
                mount_point=self._mount,
                max_versions=str(ANCHOR_MAX_VERSIONS),
                delete_version_after="0s",
            )
        return True

    def publish(self, anchor: ChainAnchor) -> bool:
        for _ in range(_PUBLISH_ATTEMPTS):
            current, newest = self._newest()
            if newest is not None and newest.seq >= anchor.seq:
                return False
            if current == 0:
                self._first_use()
            action = f"publish the anchor at {self.location}"
            try:
                with vault_errors(address_of(self._client), action):
                    self._kv.create_or_update_secret(
                        path=self._path,
                        mount_point=self._mount,
                        secret=anchor.model_dump(mode="json"),
                        cas=current,
                    )
                return True
            except VaultError as exc:
                if not _cas_mismatch(exc.__cause__):
                    raise
        raise AnchorError(
            f"the anchor at {self.location} kept moving under {_PUBLISH_ATTEMPTS} attempts to "
            f"publish seq {anchor.seq}: the next append or `erasure audit anchor` publishes it"
        )

    def history(self) -> AnchorHistory:
        meta = self._metadata()
        if meta is None:
            return AnchorHistory(location=self.location, anchors=[])
        versions: dict[str, Any] = meta.get("versions") or {}
        current = int(meta.get("current_version") or 0)
        anchors: list[ChainAnchor] = []
        missing: list[str] = []
        for number in range(1, current + 1):
            info = versions.get(str(number))
            if info is None:
                missing.append(f"anchor version {number} was pruned (KV max_versions lowered)")
            elif info.get("destroyed"):
                missing.append(f"anchor version {number} was destroyed")
            elif info.get("deletion_time"):
                missing.append(f"anchor version {number} was deleted")
            else:
                anchor = self._read(number)
                if anchor is None:
                    missing.append(f"anchor version {number} is not a chain head")
                else:
                    anchors.append(anchor)
        return AnchorHistory(location=self.location, anchors=anchors, missing=missing)

    # -- internals ---------------------------------------------------------------------------

    def _first_use(self) -> None:
        """Keep every version from the first: `erasure keys init` does it in production (the
        signer may not), a development server's root token does it here."""
        try:
            self.keep_every_version()
        except VaultError as exc:
            if not isinstance(exc.__cause__, hvac.exceptions.Forbidden):
                raise

    def _metadata(self) -> dict[str, Any] | None:
        with vault_errors(address_of(self._client), f"read metadata of {self.location}"):
            try:
                meta = self._kv.read_secret_metadata(path=self._path, mount_point=self._mount)
            except hvac.exceptions.InvalidPath as exc:
                if not is_not_found(exc):
                    raise
                return None
        data: dict[str, Any] = meta["data"]
        return data

    def _newest(self) -> tuple[int, ChainAnchor | None]:
        """The current version number (0 if none) and its anchor."""
        meta = self._metadata()
        current = 0 if meta is None else int(meta.get("current_version") or 0)
        return current, (self._read(current) if current else None)

    def _read(self, number: int) -> ChainAnchor | None:
        with vault_errors(address_of(self._client), f"read {self.location} version {number}"):
            try:
                answer = self._kv.read_secret_version(
                    path=self._path,
                    mount_point=self._mount,
                    version=number,
                    raise_on_deleted_version=True,
                )
            except hvac.exceptions.InvalidPath as exc:
                if not is_not_found(exc):
                    raise
                return None
        try:
            anchor = ChainAnchor.model_validate(answer["data"]["data"])
        except (ValidationError, KeyError, TypeError):
            return None
        return anchor.model_copy(update={"version": number})


def anchor_of(seq: int, record_hash: str, signature: str, key_version: int) -> ChainAnchor:
    """The anchor of the record at `seq`, published now."""
    return ChainAnchor(
        seq=seq,
        record_hash=record_hash,
        signature=signature,
        signing_key_version=key_version,
        published_at=datetime.now(UTC),
    )


def _cas_mismatch(exc: BaseException | None) -> bool:
    """Whether Vault refused a write because another one landed first."""
    return isinstance(exc, hvac.exceptions.InvalidRequest) and bool(
        re.search(r"check-and-set", str(exc))
    )
