"""The pepper (HMAC key of subject hashes) in KV v2 at `<mount>/pepper`, one KV version per
pepper version. It is never shredded: tombstones hashed under any version must stay checkable.

A missing pepper fails closed (`PepperMissing`): it is created once, by `initialise`, for a
deployment that holds nothing hashed under one yet. Creating a fresh version 1 while
tombstones or per-subject keys exist would orphan them all: CRM ingest would suppress nobody.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any, Protocol

import hvac
import hvac.exceptions

from erasure.errors import VaultError
from erasure.keys.vault import address_of, ensure_kv_v2, is_not_found, vault_errors
from erasure.pseudonym import Pepper

PEPPER_BYTES = 32
# KV v2 keeps 10 versions unless told otherwise, and would silently destroy old peppers.
_MAX_VERSIONS = 100_000


class PepperSource(Protocol):
    """Where peppers come from (PepperStore; tests pass fixed ones)."""

    def current(self) -> Pepper: ...

    def all_versions(self) -> list[Pepper]: ...


class PepperMissing(VaultError):
    """No pepper is in Vault: never replaced silently, since everything hashed depends on it."""


def would_orphan(location: str, held: list[str]) -> PepperMissing:
    """The refusal to create a pepper while `held` (e.g. "3 tombstone(s)") depend on one."""
    return PepperMissing(
        f"the pepper at {location} is missing while {', '.join(held)} hashed under it exist: "
        "restore it from a Vault snapshot. A new pepper would match none of them (CRM "
        "ingest would suppress nobody)"
    )


class PepperStore:
    """Versioned pepper: `current()` for hashing, `all_versions()` for checking tombstones."""

    def __init__(
        self, client: hvac.Client, mount: str = "erasure-kv", path: str = "pepper"
    ) -> None:
        self._client = client
        self._kv = client.secrets.kv.v2
        self._mount = mount
        self._path = path

    @property
    def location(self) -> str:
        return f"{self._mount}/{self._path}"

    def ensure_mount(self) -> None:
        """Enable the KV v2 mount if absent (needs sys/mounts rights)."""
        ensure_kv_v2(self._client, self._mount)

    def current(self) -> Pepper:
        """The newest pepper; PepperMissing if none was ever initialised."""
        latest = self._read()
        if latest is None:
            raise self._missing()
        return latest

    def exists(self) -> bool:
        """Whether any pepper version was ever written (and the latest is live)."""
        with vault_errors(self._address, f"read metadata of {self.location}"):
            return self._latest_is_live()

    def initialise(self) -> Pepper:
        """Create version 1 (32 random bytes) unless a pepper exists; the current one.

        Only an identity allowed to write the pepper creates it (the embedded dev server's
        root token; in production the operator's `erasure keys init`): anyone else gets a
        VaultError saying so, never a pepper of their own.
        """
        latest = self._read()
        if latest is not None:
            return latest
        try:
            return self._write(cas=0)
        except VaultError as exc:
            if isinstance(exc.__cause__, hvac.exceptions.Forbidden):
                raise VaultError(
                    f"there is no pepper at {self.location} ({self._address}) yet, and this "
                    "identity may not create it: an operator creates version 1 with "
                    "`erasure keys init`"
                ) from None
            raise

    def version(self, number: int) -> Pepper:
        """Pepper version `number` (a request hashes under the version it registered with)."""
        for pepper in self.all_versions():
            if pepper.version == number:
                return pepper
        raise VaultError(
            f"pepper version {number} is not in Vault at {self.location}: restore it (a pepper "
            "is never deleted; tombstones and request keys depend on it)"
        )

    def rotate(self) -> Pepper:
        """Add a new pepper version and return it; older versions stay readable."""
        return self._write(cas=self.current().version)

    def all_versions(self) -> list[Pepper]:
        """Every active version, oldest first; VaultError if KV pruned one (tombstones at risk)."""
        with vault_errors(self._address, f"read metadata of {self.location}"):
            try:
                meta = self._kv.read_secret_metadata(path=self._path, mount_point=self._mount)
            except hvac.exceptions.InvalidPath as exc:
                if not is_not_found(exc):
                    raise
                raise self._missing() from None
        data = meta["data"]
        versions: dict[str, Any] = data.get("versions") or {}
        current = int(data.get("current_version") or 0)
        present = {int(v) for v in versions}
        missing = sorted(set(range(1, current + 1)) - present)
        if missing:
            raise VaultError(
                f"pepper versions {missing} at {self.location} ({self._address}) were pruned by "
                "KV max_versions: tombstones hashed with them can no longer be matched; restore "
                "them from a Vault snapshot"
            )
        peppers = []
        for number in sorted(present):
            info = versions[str(number)]
            if info.get("destroyed") or info.get("deletion_time"):
                continue  # deliberately retired by an operator
            pepper = self._read(number)
            if pepper is not None:
                peppers.append(pepper)
        return peppers

    # -- internals ---------------------------------------------------------------------------

    def _missing(self) -> PepperMissing:
        return PepperMissing(
            f"no pepper at {self.location} ({self._address}): subject hashes, tombstones and "
            "per-subject keys cannot be computed or checked. Restore it from a Vault snapshot "
            "if this deployment ever had one; on a new deployment an operator creates it "
            "(`erasure keys init`)"
        )

    @property
    def _address(self) -> str:
        return address_of(self._client)

    def _read(self, version: int | None = None) -> Pepper | None:
        """One version (default: the latest), or None if the pepper was never written."""
        label = f"{self.location} version {version}" if version else self.location
        for _ in range(3):  # a concurrent first writer can make a 404 stale at once
            with vault_errors(self._address, f"read {label}"):
                try:
                    response = self._kv.read_secret_version(
                        path=self._path,
                        version=version,
                        mount_point=self._mount,
                        raise_on_deleted_version=True,
                    )
                except hvac.exceptions.InvalidPath as exc:
                    if not is_not_found(exc):
                        raise
                    if version is not None or not self._latest_is_live():
                        return None
                    continue
            try:
                secret = base64.b64decode(response["data"]["data"]["secret"], validate=True)
                number = int(response["data"]["metadata"]["version"])
            except (KeyError, TypeError, ValueError):
                raise VaultError(
                    f"the pepper at {self.location} ({self._address}) is malformed"
                ) from None
            return Pepper(version=number, secret=secret)
        raise VaultError(f"the pepper at {self.location} ({self._address}) cannot be read")

    def _latest_is_live(self) -> bool:
        """False if no version exists; True if the latest exists; VaultError if it is deleted."""
        try:
            meta = self._kv.read_secret_metadata(path=self._path, mount_point=self._mount)
        except hvac.exceptions.InvalidPath:
            return False
        data = meta["data"]
        current = int(data.get("current_version") or 0)
        if current == 0:
            return False
        latest = (data.get("versions") or {}).get(str(current), {})
        if latest.get("destroyed") or latest.get("deletion_time"):
            raise VaultError(
                f"the latest pepper at {self.location} ({self._address}) is deleted: "
                "undelete it; a new pepper would orphan every tombstone"
            )
        return True

    def _write(self, cas: int) -> Pepper:
        """Write version cas+1; if another writer got there first, theirs is the answer."""
        secret = secrets.token_bytes(PEPPER_BYTES)
        with vault_errors(self._address, f"write {self.location}"):
            if cas == 0:
                self._kv.update_metadata(
                    path=self._path, max_versions=_MAX_VERSIONS, mount_point=self._mount
                )
            try:
                response = self._kv.create_or_update_secret(
                    path=self._path,
                    secret={"secret": base64.b64encode(secret).decode()},
                    cas=cas,
                    mount_point=self._mount,
                )
            except hvac.exceptions.InvalidRequest as exc:
                if "check-and-set" not in "; ".join(exc.errors or []):
                    raise
                winner = self._read()
                if winner is None:
                    raise VaultError(
                        f"the pepper at {self.location} could not be written"
                    ) from None
                return winner
        return Pepper(version=int(response["data"]["version"]), secret=secret)
