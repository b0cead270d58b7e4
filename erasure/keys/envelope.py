"""Envelope encryption for producers that write immutable stores under per-subject keys.

Records are sealed locally (AES-256-GCM, `erasure.keys.blob`); keys come from a
SubjectKeyStore and are kept in a small LRU so a hot subject costs one Vault call, not one per
record. Shredding through the cipher evicts the subject first and last, so a shredded key
never lingers here; other processes' caches forget it within `ttl_seconds`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from erasure.errors import DecryptionError, KeyNotFoundError
from erasure.keys import blob
from erasure.keys.keystore import ShredResult, SubjectKeyStore, check_subject_hash

# A transit data key is reused for many records; random 96-bit nonces stay safe far beyond
# this (NIST: 2^32 per key), and a fresh data key is cheap.
_MAX_USES_PER_DATA_KEY = 1 << 20
_MAX_UNWRAPPED_PER_SUBJECT = 8


@dataclass(slots=True)
class _Entry:
    expires_at: float
    sealing: tuple[AESGCM, bytes] | None = None  # (data key, its wrapped form) for encrypt
    uses: int = 0
    opening: dict[bytes, AESGCM] = field(default_factory=dict)  # wrapped form -> data key


class KeyCache:
    """A bounded, thread-safe LRU of subjects' data keys, each entry living `ttl_seconds`."""

    def __init__(self, max_subjects: int, ttl_seconds: float) -> None:
        if max_subjects < 0 or ttl_seconds < 0:
            raise ValueError("cache size and ttl must not be negative")
        self._max = max_subjects
        self._ttl = ttl_seconds
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, subject_hash: object) -> bool:
        with self._lock:
            return isinstance(subject_hash, str) and self._live(subject_hash) is not None

    def sealing_key(self, subject_hash: str) -> tuple[AESGCM, bytes] | None:
        """The cached encryption key of a subject, counting this use."""
        with self._lock:
            entry = self._live(subject_hash)
            if entry is None or entry.sealing is None:
                return None
            entry.uses += 1
            if entry.uses > _MAX_USES_PER_DATA_KEY:
                entry.sealing = None
                return None
            return entry.sealing

    def opening_key(self, subject_hash: str, wrapped: bytes) -> AESGCM | None:
        """The cached decryption key for a blob's wrapped data key."""
        with self._lock:
            entry = self._live(subject_hash)
            return entry.opening.get(wrapped) if entry is not None else None

    def put(self, subject_hash: str, aead: AESGCM, wrapped: bytes, *, sealing: bool) -> None:
        """Remember a data key (for encrypting if `sealing`, always for opening its blobs)."""
        if self._max == 0:
            return
        with self._lock:
            entry = self._live(subject_hash)
            if entry is None:
                entry = _Entry(expires_at=time.monotonic() + self._ttl)
                self._entries[subject_hash] = entry
                while len(self._entries) > self._max:
                    self._entries.popitem(last=False)
            if sealing:
                entry.sealing, entry.uses = (aead, wrapped), 0
            if len(entry.opening) >= _MAX_UNWRAPPED_PER_SUBJECT:
                entry.opening.pop(next(iter(entry.opening)))
            entry.opening[wrapped] = aead

    def evict(self, subject_hash: str) -> None:
        """Forget every key of a subject."""
        with self._lock:
            self._entries.pop(subject_hash, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _live(self, subject_hash: str) -> _Entry | None:
        """The entry if present and fresh, marked most recently used; caller holds the lock."""
        entry = self._entries.get(subject_hash)
        if entry is None:
            return None
        if entry.expires_at <= time.monotonic():
            del self._entries[subject_hash]
            return None
        self._entries.move_to_end(subject_hash)
        return entry


class EnvelopeCipher:
    """Encrypt and decrypt one subject's records for one dataset, keys from `keystore`."""

    def __init__(
        self, keystore: SubjectKeyStore, cache_size: int = 4096, ttl_seconds: float = 300.0
    ) -> None:
        self.keystore = keystore
        self.cache = KeyCache(cache_size, ttl_seconds)

    def encrypt(self, subject_hash: str, dataset: str, plaintext: bytes) -> bytes:
        """A blob only this subject's key opens, bound to `dataset`; KeyNotFoundError if the
        subject has no key (never created, or shredded: the record must not be written)."""
        check_subject_hash(subject_hash)
        cached = self.cache.sealing_key(subject_hash)
        if cached is None:
            data_key = self.keystore.get(subject_hash)
            cached = (AESGCM(data_key.material), data_key.wrapped)
            self.cache.put(subject_hash, cached[0], cached[1], sealing=True)
        aead, wrapped = cached
        return blob.seal(aead, wrapped, subject_hash, dataset, plaintext)

    def decrypt(self, subject_hash: str, dataset: str, data: bytes) -> bytes:
        """The plaintext of a blob; DecryptionError if the key is gone, or subject, dataset or
        bytes do not match. A Vault outage stays a VaultError: it says nothing about the data."""
        check_subject_hash(subject_hash)
        parsed = blob.parse(data)
        aead = self.cache.opening_key(subject_hash, parsed.wrapped)
        if aead is None:
            try:
                material = self.keystore.unwrap(subject_hash, parsed.wrapped)
            except KeyNotFoundError as exc:
                raise DecryptionError(
                    f"the subject's key is gone ({self.keystore.key_id(subject_hash)}): "
                    "shredded or never created, so the record cannot be decrypted"
                ) from exc
            aead = AESGCM(material)
            self.cache.put(subject_hash, aead, parsed.wrapped, sealing=False)
        return blob.open_blob(aead, parsed, subject_hash, dataset)

    def evict(self, subject_hash: str) -> None:
        """Drop the subject's keys from memory."""
        self.cache.evict(subject_hash)

    def shred(self, subject_hash: str) -> ShredResult:
        """Shred the subject's key in the key store, evicting it here before and after."""
        self.evict(subject_hash)
        try:
            return self.keystore.shred(subject_hash)
        finally:
            self.evict(subject_hash)  # a concurrent encrypt may have re-cached it meanwhile
