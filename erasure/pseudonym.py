"""Identifier normalisation and the keyed hash that stands for a subject everywhere.

`HMAC-SHA256(pepper_v, type || ":" || normalised)`: the pepper lives in Vault, is versioned
and is never shredded, so the same person always maps to the same tombstone.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

import phonenumbers

from erasure.errors import SubjectError

NORMALISERS = ("email", "strip", "e164", "lower")


def normalise(kind: str, value: str, *, default_region: str | None = None) -> str:
    """The canonical form of an identifier under normaliser `kind`; SubjectError if malformed."""
    if kind == "strip":
        out = value.strip()
    elif kind == "lower":
        out = value.strip().lower()
    elif kind == "email":
        out = value.strip().lower()
        if out.count("@") != 1 or out.startswith("@") or out.endswith("@"):
            raise SubjectError("the email identifier is not of the form local@domain")
    elif kind == "e164":
        try:
            number = phonenumbers.parse(value, default_region)
        except phonenumbers.NumberParseException:
            raise SubjectError(
                "the phone identifier cannot be parsed: give it in international form (+...) "
                "or set default_region for the identifier type in the catalog"
            ) from None
        if not phonenumbers.is_possible_number(number):
            raise SubjectError("the phone identifier is not a possible number")
        out = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
    else:
        raise SubjectError(f"unknown normaliser {kind!r}; allowed: {', '.join(NORMALISERS)}")
    if not out:
        raise SubjectError("the identifier is empty after normalisation")
    return out


@dataclass(frozen=True, slots=True)
class Pepper:
    """One version of the HMAC key; `secret` never leaves the process that fetched it."""

    version: int
    secret: bytes

    def __repr__(self) -> str:
        return f"Pepper(version={self.version}, secret=<redacted>)"


def subject_hash(pepper: Pepper, id_type: str, normalised: str) -> str:
    """Hex HMAC-SHA256 of `type:normalised` under `pepper`."""
    message = f"{id_type}:{normalised}".encode()
    return hmac.new(pepper.secret, message, hashlib.sha256).hexdigest()
