"""The chain head published outside the store: an anchor its owner cannot rewrite.

The store's owner can drop the append-only triggers, cut the tail and rewind the head, or wipe
the store: the chain then still verifies on its own. So after every append the ledger
publishes the new head (seq, record_hash, and that record's signature) as a KV v2 secret of
its own, `<kv mount>/anchors/chain-head/<seq>`, written once. Every component's policy denies
delete, destroy and undelete there, and the signer may create a head but not write one again,
so the published heads are out of the store owner's reach; `erasure audit verify` compares
the chain with every one of them (`erasure.audit.chain`): a wiped store, a cut tail or a
re-signed record is a problem, without the auditor having kept anything.

Publishing is idempotent: a head published already, as the same record, is left as it is.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Protocol

import hvac
import hvac.exceptions
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from erasure.errors import ErasureError, VaultError
from erasure.keys.vault import address_of, is_not_found, vault_errors

ANCHOR_PATH = "anchors/chain-head"
_HEX64 = r"^[0-9a-f]{64}$"


class AnchorError(ErasureError):
    """The anchor could not be published or read."""


class ChainAnchor(BaseModel):
    """One published chain head; `version`: how many times it was written, once read back
    (1, or it was tampered with)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int = Field(ge=1)
    record_hash: str = Field(pattern=_HEX64)
    signature: str = Field(min_length=1, max_length=512)
    signing_key_version: int = Field(ge=1)
    published_at: datetime
    version: int | None = Field(default=None, exclude=True)


class AnchorHistory(BaseModel):
    """Every head a board holds, in seq order, and what is wrong with any of them."""

    location: str
    anchors: list[ChainAnchor]
    # One line per head deleted, destroyed or written again: each one is tampering.
    missing: list[str] = Field(default_factory=list)

    @property
    def newest(self) -> ChainAnchor | None:
        return self.anchors[-1] if self.anchors else None


class AnchorBoard(Protocol):
    """Where chain heads are published (VaultAnchorBoard; unit tests keep one in memory)."""

    @property
    def location(self) -> str: ...

    def publish(self, anchor: ChainAnchor) -> bool:
        """Publish `anchor` unless its seq is published already as the same record (False);
        AnchorError if it is published as another."""
        ...

    def history(self) -> AnchorHistory:
        """Every published head, in seq order."""
        ...


class VaultAnchorBoard:
    """One KV v2 secret per published head, `<path>/<seq, 12 digits>`, each written once.

    A secret per head, not a version per head: KV v2 rewrites a secret's whole version list on
    every write (at 10,000 versions a write took 16 ms here and growing), and keeps no more
    than its max_versions. Written with check-and-set 0 (create only) under a policy that
    grants `create` and not `update`, a published head cannot be rewritten: a second version
    of one is tampering, and so is one deleted or destroyed.
    """

    def __init__(self, client: hvac.Client, mount: str, path: str = ANCHOR_PATH) -> None:
        self._client = client
        self._kv = client.secrets.kv.v2
        self._mount = mount
        self._path = path

    @property
    def location(self) -> str:
        return f"{self._mount}/{self._path}"

    def publish(self, anchor: ChainAnchor) -> bool:
        key = self._key(anchor.seq)
        try:
            with vault_errors(address_of(self._client), f"publish the head at {self.location}"):
                self._kv.create_or_update_secret(
                    path=key, mount_point=self._mount, secret=anchor.model_dump(mode="json"), cas=0
                )
            return True
        except VaultError as exc:
            if not _cas_mismatch(exc.__cause__) and not isinstance(
                exc.__cause__, hvac.exceptions.Forbidden
            ):
                raise
        # Published already (a retry, or the next append catching up): the same head, or not.
        published = self._read(anchor.seq)
        if published is not None and published.record_hash == anchor.record_hash:
            return False
        raise AnchorError(
            f"seq {anchor.seq} was published at {self.location} as another record: the chain "
            "was cut and re-signed after it was published, or the head is not this chain's; "
            "run `erasure audit verify`; nothing was published"
        )

    def history(self) -> AnchorHistory:
        anchors: list[ChainAnchor] = []
        missing: list[str] = []
        for seq in self._published_seqs():
            status, anchor = self._read_status(seq)
            if anchor is not None:
                anchors.append(anchor)
            if status:
                missing.append(f"the head published for seq {seq} {status}")
        return AnchorHistory(location=self.location, anchors=anchors, missing=missing)

    # -- internals ---------------------------------------------------------------------------

    def _key(self, seq: int) -> str:
        return f"{self._path}/{seq:012d}"

    def _published_seqs(self) -> list[int]:
        with vault_errors(address_of(self._client), f"list the heads at {self.location}"):
            try:
                listed = self._kv.list_secrets(path=self._path, mount_point=self._mount)
            except hvac.exceptions.InvalidPath as exc:
                if not is_not_found(exc):
                    raise
                return []
        keys = listed["data"]["keys"]
        return sorted(int(k) for k in keys if isinstance(k, str) and k.isdigit())

    def _read(self, seq: int) -> ChainAnchor | None:
        return self._read_status(seq)[1]

    def _read_status(self, seq: int) -> tuple[str, ChainAnchor | None]:
        """The head published for `seq`, and what is wrong with it ("" when nothing is)."""
        where = f"read the head of seq {seq} at {self.location}"
        with vault_errors(address_of(self._client), where):
            try:
                answer = self._kv.read_secret_version(
                    path=self._key(seq), mount_point=self._mount, raise_on_deleted_version=False
                )
            except hvac.exceptions.InvalidPath as exc:
                if not is_not_found(exc):
                    raise
                return "was deleted or destroyed", None
        data = answer.get("data") or {}
        meta = data.get("metadata") or {}
        if meta.get("destroyed"):
            return "was destroyed", None
        if meta.get("deletion_time"):
            return "was deleted", None
        try:
            anchor = ChainAnchor.model_validate(data.get("data"))
        except (ValidationError, TypeError):
            return "is not a chain head", None
        version = int(meta.get("version") or 1)
        if anchor.seq != seq:
            return f"names seq {anchor.seq}", None
        status = f"was written {version} times (a published head is written once)"
        return (status if version > 1 else ""), anchor.model_copy(update={"version": version})


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
