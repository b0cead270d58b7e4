"""Free text a person types (a request reference, notes, a ruling's justification, an
extension's reason) is checked when it is entered: it must not name the subject.

Records are kept for years and read by auditors; their structured fields are typed (hashes,
dates, counts, catalog names) and cannot carry a subject value, so free text is the one way
an identifier could reach them. It is refused at entry, with a message that says which
field and which kind of value, never the value, and never after the erasure ran.

What counts as naming the subject, read the way a person could write it:
- an identity (the identifier and every identity locate expanded it to) as a whole token,
  compared case- and Unicode-insensitively (NFKC, full case folding, default-ignorable and
  format characters such as zero-width spaces removed): customer id `1` is named by "DSR-1"
  but not by "2026-12-01";
- the same with an address spelled out (`jane [at] example (dot) org`, ` at `, ` dot `);
- a look-alike (UTS #39 skeleton: Cyrillic U+0430 for Latin `a`, `0` for `O`, `rn` for
  `m`) of a value of four characters or more, as a token;
- a phone number in any format it can be written in, in any script's digits;
- personal data read from the subject's located rows (`pii_columns`: their name, an
  address), as whole tokens in the same readings; and each part of a name of three letters
  or more written as a name is (capitalised: `Mrs Canary`, not `a canary`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import phonenumbers

from erasure.catalog import Catalog
from erasure.errors import ErasureError, SubjectError
from erasure.matching import deobfuscated, skeleton
from erasure.model import Identity
from erasure.pseudonym import ascii_digits, canonical_text, fold_case, normalise

# What the refusal calls a match on personal data from the located rows.
PERSONAL_DATA = "personal data (a name or address from their rows)"
_NAME_PART = 3  # a part of a name this long, capitalised, names the person on its own
_NAME_PARTS = re.compile(r"[\s,.;/]+")
_SKELETON_TOKEN = 4  # a look-alike counts as a token of a value this many characters long
# What separates tokens: nothing an identifier (an address, a number, a name part) holds.
_TOKEN_SPLIT = re.compile(r"[\s,;:<>()\[\]{}\"'`/\\|]+")
_TOKEN_EDGES = ".!?-_"


class NamesSubject(ErasureError):
    """Free text names the subject; the message says which field and what kind of value."""


def refuse_if_named(
    catalog: Catalog,
    field: str,
    text: str | None,
    identities: Iterable[Identity],
    terms: Iterable[str] = (),
    *,
    names: Iterable[str] = (),
) -> None:
    """Raise NamesSubject if `text` holds one of `identities`, `terms` or `names` (personal
    data from the subject's rows) in any of the readings above."""
    if not text:
        return
    named = named_types(catalog, text, identities, terms, names=names)
    if named:
        raise NamesSubject(
            f"{field} contains the subject's {', '.join(named)}: it would be kept in records "
            f"and logs for years. Rewrite the {field} without it (describe the person by role "
            "or by the request, e.g. 'the requester')"
        )


def refuse_identifying_reference(
    catalog: Catalog, ref: str, identities: Iterable[Identity]
) -> None:
    """Raise NamesSubject if a request reference names the subject, or holds a number long
    enough to be a phone number anybody's (a reference becomes the run id, log paths and
    desk rows, all kept by Airflow)."""
    named = named_types(catalog, ref, identities)
    if named:
        raise NamesSubject(
            f"request_ref contains the subject's {', '.join(named)}: a reference is kept in "
            "run ids, log paths and desk rows for years. Use the desk's own numbering (e.g. "
            "DSR-2026-0042)"
        )
    for digits in re.findall(r"[0-9]+", ascii_digits(canonical_text(ref))):
        if len(digits) >= _PHONE_DIGITS and _valid_phone(digits, catalog):
            raise NamesSubject(
                f"request_ref holds a run of {len(digits)} digits that reads as a phone "
                "number: a reference is kept in run ids and logs for years. Use the desk's "
                "own numbering (e.g. DSR-2026-0042)"
            )


def named_types(
    catalog: Catalog,
    text: str,
    identities: Iterable[Identity],
    terms: Iterable[str] = (),
    *,
    names: Iterable[str] = (),
) -> list[str]:
    """The identifier types of `identities` that `text` names (and PERSONAL_DATA if one of
    `terms` or `names` is in it), sorted."""
    reading = _Reading.of(text)
    named = set()
    for identity in identities:
        spec = catalog.identifiers.get(identity.type)
        if spec is not None and spec.normalise == "e164":
            if _names_phone(reading, identity.value, spec.default_region):
                named.add(identity.type)
        elif reading.names(identity.value) or (
            spec is not None and spec.normalise == "email" and identity.value in reading.emails
        ):
            named.add(identity.type)
    if any(reading.names(term) for term in terms if term.strip()) or any(
        reading.names(name) or reading.names_a_part(name) for name in names if name.strip()
    ):
        named.add(PERSONAL_DATA)
    return sorted(named)


def contains_token(haystack: str, needle: str) -> bool:
    """Whether `needle` occurs in `haystack` not joined to a letter or digit on either side."""
    if not needle:
        return False
    start = haystack.find(needle)
    while start >= 0:
        end = start + len(needle)
        before_ok = start == 0 or not (haystack[start - 1].isalnum() and needle[0].isalnum())
        after_ok = end == len(haystack) or not (haystack[end].isalnum() and needle[-1].isalnum())
        if before_ok and after_ok:
            return True
        start = haystack.find(needle, start + 1)
    return False


@dataclass(frozen=True)
class _Reading:
    """One text read every way a value could hide in it."""

    original: str
    folded: tuple[str, ...]  # as typed, and with spelled-out addresses undone
    token_skeletons: frozenset[str]
    capitalised: frozenset[str]  # skeletons of the tokens written as names are (`Canary`)
    emails: frozenset[str]  # every address in it, as the email normaliser reads it (RFC 5322)

    @classmethod
    def of(cls, text: str) -> _Reading:
        folded = " ".join(fold_case(canonical_text(text)).split())
        plain = " ".join(deobfuscated(folded).split())
        tokens = {t.strip(_TOKEN_EDGES) for t in _TOKEN_SPLIT.split(plain)}
        written = {t.strip(_TOKEN_EDGES) for t in _TOKEN_SPLIT.split(canonical_text(text))}
        return cls(
            original=text,
            folded=(folded, plain),
            token_skeletons=frozenset(skeleton(t, padding=False) for t in tokens if t),
            capitalised=frozenset(
                skeleton(t, padding=False) for t in written if t and t[0].isupper()
            ),
            emails=frozenset(_addresses(plain)),
        )

    def names(self, value: str) -> bool:
        needle = " ".join(fold_case(canonical_text(value)).split())
        if any(contains_token(reading, needle) for reading in self.folded):
            return True
        look = skeleton(needle, padding=False)
        return len(needle) >= _SKELETON_TOKEN and bool(look) and look in self.token_skeletons

    def names_a_part(self, name: str) -> bool:
        """Whether a part of `name` (three letters or more) is written as a name here."""
        parts = _NAME_PARTS.split(canonical_text(name))
        return any(
            len(part) >= _NAME_PART and skeleton(part, padding=False) in self.capitalised
            for part in parts
        )


def _names_phone(reading: _Reading, e164: str, region: str | None) -> bool:
    """A phone number written in the text in any format or script's digits, or its digits
    within one run of digits and separators."""
    text = ascii_digits(canonical_text(reading.original))
    for match in phonenumbers.PhoneNumberMatcher(
        text, region, leniency=phonenumbers.Leniency.POSSIBLE
    ):
        if phonenumbers.format_number(match.number, phonenumbers.PhoneNumberFormat.E164) == e164:
            return True
    try:
        national = phonenumbers.national_significant_number(phonenumbers.parse(e164))
    except phonenumbers.NumberParseException:
        return False
    needles = [d for d in (e164.lstrip("+"), national, "0" + national) if len(d) >= 7]
    runs = ("".join(ch for ch in run if ch.isdigit()) for run in _DIGIT_RUNS.findall(text))
    return any(needle in run for run in runs for needle in needles) or any(
        contains_token(reading.folded[0], d) for d in (e164.lstrip("+"), national, "0" + national)
    )


_PHONE_DIGITS = 9  # fewer digits than this are not taken for a phone number in a reference


def _valid_phone(digits: str, catalog: Catalog) -> bool:
    """Whether `digits` is a valid number of a catalog phone type's region, written
    nationally or with its country code (a date and a counter run together are not)."""
    regions = {
        spec.default_region
        for spec in catalog.identifiers.values()
        if spec.normalise == "e164" and spec.default_region
    }
    for region in regions:
        code = str(phonenumbers.country_code_for_region(region))
        readings = [digits] + (["+" + digits] if digits.startswith(code) else [])
        for text in readings:
            try:
                if phonenumbers.is_valid_number(phonenumbers.parse(text, region)):
                    return True
            except phonenumbers.NumberParseException:
                continue
    return False


# Digits with the separators people put between them: spaces, dots, dashes of every kind,
# slashes, brackets.
_DIGIT_RUNS = re.compile(r"[0-9+][0-9\s.\-\u2010-\u2015\u2212\ufe63\uff0d/()]*[0-9]")
# An address with what RFC 5322 allows around its parts: quotes, comments, folding white space.
# What separates one address from the text around it: white space and the brackets and
# separators RFC 5322 puts around addresses (a quoted local part holds no white space here).
_ADDRESS_SPLIT = re.compile(r"[\s<>,;\[\]]+")
_AROUND_AT = re.compile(r"\s*@\s*")
# Brackets, quotation marks (guillemets, curly quotes) and sentence ends around an address.
_ADDRESS_EDGES = "()\u00ab\u00bb\u2039\u203a\u201c\u201d\u2018\u2019'.!?"


def _addresses(text: str) -> Iterator[str]:
    """Every address in `text`, normalised; what does not read as one is skipped."""
    for candidate in _ADDRESS_SPLIT.split(_AROUND_AT.sub("@", text)):
        if "@" not in candidate:
            continue
        for reading in {candidate, candidate.strip(_ADDRESS_EDGES)}:
            try:
                yield normalise("email", reading)
            except SubjectError:
                continue
