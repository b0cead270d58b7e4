"""Identifier normalisation and the keyed hash that stands for a subject everywhere.

Each normaliser is defined here once: locate, erase, verify, relocate and the CRM ingest
filter all decide "this stored value is the subject" by comparing its canonical form (see
`erasure.matching` for how SQL is held to the same decision). The canonical forms follow how
real systems store identifiers:

- every normaliser drops Unicode whitespace and invisible format characters (tab, newline,
  no-break space, ideographic space, zero-width space, byte-order mark) around the value,
  and composes it (NFC), so a decomposed accent is the same letter as a precomposed one;
- `lower` and `email` fold case the Unicode way (casefold: `Ä` is `ä`, `ß` is `ss`), not
  only ASCII; `email` also requires exactly one `@` with text on both sides;
- `e164` reads a phone number written in any national or international format, with
  spaces, dashes, dots, brackets, a leading 0 or 00, non-ASCII digits, an extension or a
  short annotation around it ("(home)"), and gives its E.164 form;
- `strip` keeps case: it is for opaque ids such as customer numbers.

`HMAC-SHA256(pepper_v, type || ":" || normalised)`: the pepper lives in Vault, is versioned
and is never shredded, so the same person always maps to the same tombstone.
"""

from __future__ import annotations

import hashlib
import hmac
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import phonenumbers

from erasure.errors import SubjectError

NORMALISERS = ("email", "strip", "e164", "lower")

Normaliser = Callable[[str], str]
"""Maps a raw identifier to its canonical form; raises SubjectError if it is malformed."""

# Whitespace (str.isspace) and invisible format characters (category Cf: zero-width space,
# byte-order mark, directional marks): what surrounds stored values that look clean. Planes
# 2-13 and 15-16 hold none of either.
EDGE_CHARACTERS = "".join(
    chr(cp)
    for cp in (*range(0x20000), *range(0xE0000, 0xE1000))
    if chr(cp).isspace() or unicodedata.category(chr(cp)) == "Cf"
)


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


def canonical_text(value: str) -> str:
    """`value` without surrounding whitespace or format characters, composed (NFC)."""
    if value.isascii():  # the common case: nothing to compose, ASCII whitespace only
        return value.strip()
    return unicodedata.normalize("NFC", value.strip(EDGE_CHARACTERS))


def fold_case(text: str) -> str:
    """Unicode caseless form of canonical text: casefold, then composed again (NFC)."""
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFC", unicodedata.normalize("NFD", text).casefold())


def _strip(value: str) -> str:
    out = canonical_text(value)
    if not out:
        raise SubjectError("the identifier is empty after normalisation")
    return out


def _lower(value: str) -> str:
    out = fold_case(canonical_text(value))
    if not out:
        raise SubjectError("the identifier is empty after normalisation")
    return out


def _email(value: str) -> str:
    # Ingest runs this per row and column: one pass of cheap checks (count == 1 implies non-empty).
    out = fold_case(canonical_text(value))
    if out.count("@") != 1 or out[0] == "@" or out[-1] == "@":
        raise SubjectError("the email identifier is not of the form local@domain")
    return out


_PHONE_PARSE_ERROR = (
    "the phone identifier cannot be parsed: give it in international form (+...) "
    "or set default_region for the identifier type in the catalog"
)


def _e164(value: str, *, default_region: str | None) -> str:
    text = canonical_text(value)
    number = _parse_phone(text, default_region)
    if number is None or _has_letters(text):
        # Letters: an annotation ("(home)", "mobile") or a vanity number ("0800-FLOWERS").
        # parse() reads letters as keypad digits, the matcher reads the number around text.
        found = [
            m.number
            for m in phonenumbers.PhoneNumberMatcher(
                text, default_region, leniency=phonenumbers.Leniency.POSSIBLE
            )
        ]
        if len(found) > 1:
            raise SubjectError("the phone identifier holds more than one phone number")
        if found and (number is None or phonenumbers.is_valid_number(found[0])):
            number = found[0]
    if number is None:
        raise SubjectError(_PHONE_PARSE_ERROR)
    return str(phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164))


def _parse_phone(text: str, region: str | None) -> phonenumbers.PhoneNumber | None:
    try:
        number = phonenumbers.parse(text, region)
    except phonenumbers.NumberParseException:
        return None
    return number if phonenumbers.is_possible_number(number) else None


def _has_letters(text: str) -> bool:
    return any(ch.isalpha() for ch in text)


_BY_KIND: dict[str, Normaliser] = {"strip": _strip, "lower": _lower, "email": _email}


# A stored value of these types names nobody: its text form ("b'...'") is no identifier.
BINARY_TYPES = (bytes, bytearray, memoryview)


def canonical_or_none(normalise_value: Normaliser) -> Callable[[object], str | None]:
    """The decision every matcher shares: a stored value's canonical form, None for NULL,
    bytes or a value that cannot be normalised (it names nobody)."""

    def canonical(stored: object) -> str | None:
        if stored is None or isinstance(stored, BINARY_TYPES):
            return None
        try:
            return normalise_value(stored if isinstance(stored, str) else str(stored))
        except SubjectError:
            return None

    return canonical


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
