"""Identifier normalisation and the keyed hash that stands for a subject everywhere.

`HMAC-SHA256(pepper_v, type || ":" || normalised)`: the pepper lives in Vault, is versioned
and is never shredded, so the same person always maps to the same tombstone.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import phonenumbers

from erasure.errors import SubjectError

NORMALISERS = ("email", "strip", "e164", "lower")

Normaliser = Callable[[str], str]
"""Maps a raw identifier to its canonical form; raises SubjectError if it is malformed."""


def normalise(kind: str, value: str, *, default_region: str | None = None) -> str:
    """The canonical form of an identifier under normaliser `kind`; SubjectError if malformed."""
    return normaliser(kind, default_region)(value)


def normaliser(kind: str, default_region: str | None = None) -> Normaliser:
    """The function `normalise(kind, ...)` applies: pick it once when normalising many values."""
    if kind == "e164":
        return partial(_e164, default_region=default_region)
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise SubjectError(
            f"unknown normaliser {kind!r}; allowed: {', '.join(NORMALISERS)}"
        ) from None


def _strip(value: str) -> str:
    out = value.strip()
    if not out:
        raise SubjectError("the identifier is empty after normalisation")
    return out


def _lower(value: str) -> str:
    out = value.strip().lower()
    if not out:
        raise SubjectError("the identifier is empty after normalisation")
    return out


def _email(value: str) -> str:
    # Ingest runs this per row and column: one pass of cheap checks (count == 1 implies non-empty).
    out = value.strip().lower()
    if out.count("@") != 1 or out[0] == "@" or out[-1] == "@":
        raise SubjectError("the email identifier is not of the form local@domain")
    return out


def _e164(value: str, *, default_region: str | None) -> str:
    try:
        number = phonenumbers.parse(value, default_region)
    except phonenumbers.NumberParseException:
        raise SubjectError(
            "the phone identifier cannot be parsed: give it in international form (+...) "
            "or set default_region for the identifier type in the catalog"
        ) from None
    if not phonenumbers.is_possible_number(number):
        raise SubjectError("the phone identifier is not a possible number")
    return str(phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164))


_BY_KIND: dict[str, Normaliser] = {"strip": _strip, "lower": _lower, "email": _email}


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
