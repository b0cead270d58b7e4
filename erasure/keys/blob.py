"""The envelope blob: one AES-256-GCM sealed record in a compact, versioned byte layout.

    version (1 byte = 0x01) | wrapped-key length (2 bytes, big-endian) | wrapped key
    | nonce (12 bytes, random) | ciphertext and 16-byte tag

The wrapped key is empty when the subject key itself is the data key (kv backend) and holds
the Vault-wrapped data key with transit. The AAD binds the header, the subject hash and the
dataset (length-prefixed), so a blob opens only for the subject and dataset it was written
for, and a swapped header is detected.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from erasure.errors import DecryptionError

FORMAT_VERSION = 1
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
_HEADER = struct.Struct(">BH")
_AAD_LENGTHS = struct.Struct(">III")
_AAD_DOMAIN = b"erasure-envelope/v1"


class Blob(NamedTuple):
    """A parsed blob; `header` is the version and wrapped key as written, part of the AAD."""

    version: int
    wrapped: bytes
    nonce: bytes
    ciphertext: bytes
    header: bytes


def associated_data(header: bytes, subject_hash: str, dataset: str) -> bytes:
    """The AAD: a domain tag, then header, subject hash and dataset, length-prefixed."""
    subject, name = subject_hash.encode(), dataset.encode()
    lengths = _AAD_LENGTHS.pack(len(header), len(subject), len(name))
    return b"".join((_AAD_DOMAIN, lengths, header, subject, name))


def seal(aead: AESGCM, wrapped: bytes, subject_hash: str, dataset: str, plaintext: bytes) -> bytes:
    """Encrypt `plaintext` into a blob under the data key `aead`, with a fresh random nonce."""
    if len(wrapped) > 0xFFFF:
        raise ValueError("a wrapped data key longer than 65535 bytes does not fit the blob header")
    header = _HEADER.pack(FORMAT_VERSION, len(wrapped)) + wrapped
    nonce = os.urandom(NONCE_BYTES)
    sealed = aead.encrypt(nonce, plaintext, associated_data(header, subject_hash, dataset))
    return b"".join((header, nonce, sealed))


def parse(blob: bytes) -> Blob:
    """Split a blob into its parts; DecryptionError if it is not one this version can read."""
    if len(blob) < _HEADER.size:
        raise DecryptionError("the record is too short to be an encrypted envelope")
    version, wrapped_len = _HEADER.unpack_from(blob)
    if version != FORMAT_VERSION:
        raise DecryptionError(
            f"the record has envelope format version {version}; this code reads {FORMAT_VERSION}"
        )
    start = _HEADER.size + wrapped_len
    body = start + NONCE_BYTES
    if len(blob) < body + TAG_BYTES:
        raise DecryptionError("the record is truncated: shorter than its header announces")
    blob = bytes(blob)  # a bytearray/memoryview would make the slices below views or copies
    return Blob(version, blob[_HEADER.size : start], blob[start:body], blob[body:], blob[:start])


def open_blob(aead: AESGCM, blob: Blob, subject_hash: str, dataset: str) -> bytes:
    """Decrypt a parsed blob; DecryptionError if key, subject, dataset or bytes do not match."""
    try:
        return aead.decrypt(
            blob.nonce, blob.ciphertext, associated_data(blob.header, subject_hash, dataset)
        )
    except InvalidTag:
        raise DecryptionError(
            "the record failed authentication: it was written for another subject or dataset, "
            "under another key, or it was altered"
        ) from None
