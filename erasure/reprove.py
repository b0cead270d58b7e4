"""The daily second proof of every completed request: what its record says was done still holds.

A completion record proves what was true when it was signed. Afterwards a tombstone deleted
from the suppression list brings the subject back at the next CRM sync, and a key restored
from a Vault snapshot makes shredded copies readable again; neither would be noticed. So
every day each completed request is proved again from its own record: every tombstone it
cites is in the suppression list, every key it destroyed (crypto-shreds, the keys verify
found absent, the request-scoped key) is still absent from Vault. Anything missing is
named by request reference and what is missing (identifier type, pepper version, key id
by keyed hash), never by an identifier.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import hvac
from pydantic import BaseModel, ConfigDict

from erasure.audit.records import CompletionRecord
from erasure.errors import ErasureError
from erasure.keys.keystore import SubjectKeyStore, keystore_from_config
from erasure.model import Action

# The key ids evidence records: `kv:<mount>/subjects/<hash>`, `transit:<mount>/keys/subject-<hash>`.
_KEY_ID = re.compile(
    r"^(?:(?P<kv>kv):(?P<kv_mount>.+)/subjects/|(?P<transit>transit):(?P<transit_mount>.+)"
    r"/keys/subject-)(?P<hash>[0-9a-f]{64})$"
)
KEY_DESTROYED_CHECK = "key destroyed"


class ReproofError(ErasureError):
    """A completed request no longer holds: a tombstone is gone or a destroyed key is back."""


class Missing(BaseModel):
    """One thing a completed request's record proved that no longer holds."""

    model_config = ConfigDict(frozen=True)

    request_ref: str
    what: str


class Reproof(BaseModel):
    """What the daily check looked at, and what it found missing (empty: all holds)."""

    model_config = ConfigDict(frozen=True)

    requests: int
    tombstones: int
    keys: int
    missing: list[Missing]

    @property
    def ok(self) -> bool:
        return not self.missing

    def require(self) -> Reproof:
        """Itself when everything holds; ReproofError naming every request and gap if not."""
        if self.ok:
            return self
        lines = [f"request {m.request_ref}: {m.what}" for m in self.missing]
        raise ReproofError(
            f"{len(self.missing)} proof(s) of {self.requests} completed request(s) no longer "
            "hold: " + "; ".join(lines) + ". Restore the tombstone (re-run the request's "
            "tombstone step) or shred the key again, find who removed or restored it, and "
            "record it in the runbook"
        )


class KeyProbe:
    """Whether a key named by its evidence id exists, in the key store of that id's kind and
    mount (a deployment may have changed kind or mount since the key was destroyed)."""

    def __init__(
        self,
        client: hvac.Client,
        build: Callable[[Mapping[str, Any], hvac.Client], SubjectKeyStore] = keystore_from_config,
    ) -> None:
        self._client = client
        self._build = build
        self._stores: dict[tuple[str, str], SubjectKeyStore] = {}

    def exists(self, key_id: str) -> bool | None:
        """True/False; None when the id is not one this probe can read (kv or transit)."""
        found = _KEY_ID.match(key_id)
        if found is None:
            return None
        kind = "kv" if found["kv"] else "transit"
        mount = found["kv_mount"] or found["transit_mount"]
        store = self._stores.get((kind, mount))
        if store is None:
            store = self._build({"kind": kind, "mount": mount}, self._client)
            self._stores[(kind, mount)] = store
        return store.exists(found["hash"])


def cited_tombstones(body: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The tombstones a completed record's body cites; None if it cites none at all."""
    tombstone = body.get("tombstone")
    if not isinstance(tombstone, Mapping):
        return None
    entries = tombstone.get("tombstones")
    if not isinstance(entries, list) or not entries:
        return None
    return [e for e in entries if isinstance(e, Mapping)]


def destroyed_keys(body: Mapping[str, Any]) -> list[str]:
    """Key ids a completed record's body proves destroyed: its crypto-shreds' keys and the
    keys its verification found absent."""
    ids: set[str] = set()
    for artefact in body.get("artefacts") or []:
        if artefact.get("action") == Action.CRYPTO_SHRED.value:
            for key in (artefact.get("evidence") or {}).get("keys") or []:
                if isinstance(key, Mapping) and isinstance(key.get("key_id"), str):
                    ids.add(key["key_id"])
    for check in (body.get("verification") or {}).get("checks") or []:
        if check.get("check") == KEY_DESTROYED_CHECK and check.get("passed"):
            ids.add(str(check.get("target")))
    return sorted(ids)


def reprove_completed(
    completed: Iterable[CompletionRecord],
    tombstone_present: Callable[[str, int], bool],
    key_exists: Callable[[str], bool | None],
    request_key: Callable[[str], str | None],
) -> Reproof:
    """Prove each completed record again: its tombstones present, its destroyed keys absent.

    `tombstone_present(hash, pepper_version)`, `key_exists(key_id)` (None: cannot tell), and
    `request_key(ref)`: the id of the request-scoped key its completion destroyed, or None.
    """
    requests = tombstones = keys = 0
    missing: list[Missing] = []
    for record in completed:
        requests += 1
        ref = record.request_ref
        cited = cited_tombstones(record.body)
        if cited is None:
            missing.append(Missing(request_ref=ref, what="its completed record cites no tombstone"))
        for stone in cited or []:
            tombstones += 1
            version = int(stone.get("pepper_version", 0))
            if not tombstone_present(str(stone.get("subject_hash", "")), version):
                missing.append(
                    Missing(
                        request_ref=ref,
                        what=f"tombstone ({stone.get('identifier_type', '?')}, pepper version "
                        f"{version}) is no longer in the suppression list",
                    )
                )
        key_ids = destroyed_keys(record.body)
        if (own := request_key(ref)) is not None:
            key_ids.append(own)
        for key_id in key_ids:
            keys += 1
            present = key_exists(key_id)
            if present is None:
                missing.append(
                    Missing(
                        request_ref=ref,
                        what=f"key {key_id} cannot be checked: not a kv or transit key id",
                    )
                )
            elif present:
                missing.append(
                    Missing(
                        request_ref=ref,
                        what=f"key {key_id} exists again in Vault (restored from a snapshot, "
                        "or re-created)",
                    )
                )
    return Reproof(requests=requests, tombstones=tombstones, keys=keys, missing=missing)
