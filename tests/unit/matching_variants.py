"""Seeded generators of the forms an identifier is stored in, to probe the SQL side of matching.

`erasure.matching` holds Postgres to Python's decision with a broader SQL predicate that must
never miss a stored value Python decides is the subject's. These generators build such values
the way real systems garble them: any character swapped for one that case-folds or composes to
the same text (Kelvin sign for k, long s for s, the fi ligature for fi, capital sharp s for
ss, final sigma for sigma), case changed the Unicode way, NFC, NFD or a mix, whitespace and
invisible format characters from the full sets around the value; phone numbers of every
region in national and international forms with any separators, prefixes, digits of any
script, keypad letters, extensions and annotations. Fixed seeds: every run builds the same
values.
"""

from __future__ import annotations

import random
import string
import sys
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

import phonenumbers as pn

from erasure.errors import SubjectError
from erasure.pseudonym import EDGE_CHARACTERS, canonical_text, fold_case, normalise

SEED = 20260817

# Characters whose fold or composition is special: the corpus's stars, in every target pool.
SPECIAL = (
    "\u00df\u1e9e\u017f\ufb01\ufb02\ufb00\ufb03\ufb04\ufb05\ufb06"  # sharp s, long s, ligatures
    "\u212a\u212b\u2126\u0130\u0131"  # KELVIN, ANGSTROM, OHM signs; dotted and dotless i
    "\u03c2\u03a3\u03c3\u01c5\u01c4\u01c6\u0149\u1e9a"  # sigmas, digraphs, n with apostrophe
    "\u0390\u03b0\u01f0\u1e96\u1e98\u1e99\u1fb3\u1ffc\ufb13\u0386\u0388"  # folds to 2-3
)
_EMAIL_SAFE = string.ascii_letters + string.digits + "._-+"


@dataclass(frozen=True)
class Probe:
    """One target (canonical form) and stored values generated for it."""

    kind: str  # normaliser
    target: str
    stored: tuple[str, ...]


@cache
def _codepoints() -> tuple[str, ...]:
    """Every assignable character: no surrogates, no NUL (Postgres text refuses it)."""
    return tuple(
        chr(cp)
        for cp in range(1, sys.maxunicode + 1)
        if not 0xD800 <= cp <= 0xDFFF and unicodedata.category(chr(cp)) != "Cn"
    )


@cache
def _cased() -> tuple[str, ...]:
    """Letters of every script that has case."""
    return tuple(
        ch
        for ch in _codepoints()
        if ch.isalpha() and (ch.lower() != ch or ch.upper() != ch or ch.casefold() != ch)
    )


@cache
def _preimages(case_folded: bool) -> dict[str, tuple[str, ...]]:
    """Canonical text -> single characters that canonicalise to it (fold or compose)."""
    found: dict[str, list[str]] = {}
    for ch in _codepoints():
        if ch in EDGE_CHARACTERS or any(c.isspace() for c in unicodedata.normalize("NFKC", ch)):
            continue  # NFKC makes a space of it (spacing accents): only its edges are stripped
        out = canonical_text(ch)
        if case_folded:
            out = fold_case(out)
        if out and len(out) <= 3:
            found.setdefault(out, []).append(ch)
    return {k: tuple(v) for k, v in found.items()}


def _respell(rng: random.Random, canonical: str, *, case_folded: bool) -> str:
    """`canonical` with characters swapped for others of the same canonical form."""
    pre = _preimages(case_folded)
    out: list[str] = []
    i = 0
    while i < len(canonical):
        options = [(k, ch) for k in (3, 2, 1) for ch in pre.get(canonical[i : i + k], ())]
        k, ch = rng.choice(options) if options else (1, canonical[i])
        if case_folded and ch.isascii() and rng.random() < 0.5:
            ch = ch.upper()
        out.append(_form(rng, ch))
        i += k
    return "".join(out)


def _form(rng: random.Random, text: str) -> str:
    return unicodedata.normalize(rng.choice(("NFC", "NFD")), text) if rng.random() < 0.6 else text


def _edges(rng: random.Random, value: str) -> str:
    """`value` with 0-3 whitespace or format characters from the full set on each side."""

    def pad() -> str:
        return "".join(rng.choice(EDGE_CHARACTERS) for _ in range(rng.randint(0, 3)))

    return pad() + value + pad()


def _case_ops(rng: random.Random, raw: str) -> str:
    op = rng.choice((str.upper, str.lower, str.title, str.swapcase, str.casefold, str))
    return unicodedata.normalize(rng.choice(("NFC", "NFD")), op(raw))


def _word(rng: random.Random, length: int, *, email: bool) -> str:
    pools = (
        _EMAIL_SAFE if email else string.ascii_letters + string.digits + "-_",
        SPECIAL,
        "".join(_cased()),
    )
    chars = []
    for _ in range(length):
        pool = rng.choices(pools, weights=(6, 2, 3))[0]
        chars.append(rng.choice(pool))
        if rng.random() < 0.08:  # a combining accent after a letter
            chars.append(rng.choice("\u0301\u0300\u0308\u0327\u030c\u0307\u0323\u0345"))
    return "".join(chars)


def text_probes(kind: str, targets: int, variants: int, seed: int = SEED) -> Iterator[Probe]:
    """Probes for the `email`, `lower` or `strip` normaliser."""
    rng = random.Random(f"{seed}:{kind}")
    case_folded = kind != "strip"
    made = 0
    while made < targets:
        if kind == "email":
            raw = _word(rng, rng.randint(2, 12), email=True) + "@"
            raw += _word(rng, rng.randint(2, 10), email=True) + "." + rng.choice(("com", "de"))
        else:
            raw = _word(rng, rng.randint(3, 14), email=False)
        try:
            target = normalise(kind, raw)
        except SubjectError:  # a malformed random value is no target
            continue
        stored = []
        for _ in range(variants):
            base = (
                _case_ops(rng, raw)
                if case_folded and rng.random() < 0.3
                else (
                    unicodedata.normalize(rng.choice(("NFC", "NFD")), raw)
                    if rng.random() < 0.2
                    else _respell(rng, target, case_folded=case_folded)
                )
            )
            stored.append(_edges(rng, base))
        made += 1
        yield Probe(kind, target, tuple(stored))


# ---------------------------------------------------------------------------------------------
# Phones

_TYPES = (
    pn.PhoneNumberType.MOBILE,
    pn.PhoneNumberType.FIXED_LINE,
    pn.PhoneNumberType.TOLL_FREE,
    pn.PhoneNumberType.VOIP,
)
_SEPARATORS = (" ", "-", ".", "\u2013", "/", "\u00a0", "", " - ", "\u3000", "\u2011")
# Dotless i and long s upper-case to I and S: phonenumbers reads them as keypad 4 and 7.
_KEYPAD = {
    "2": "abc",
    "3": "def",
    "4": "ghi\u0131",
    "5": "jkl",
    "6": "mno",
    "7": "pqrs\u017f",
    "8": "tuv",
    "9": "wxyz",
}
_ANNOTATIONS = (
    "{} (home)",
    "mobile: {}",
    "Tel: {}",
    "{} ext. 42",
    "{} x12",
    "{};ext=7",
    "tel:{}",
    "{} (Mum)",
    "ph {}",
    "{} (work, evenings)",
    "Mob. {}",
)


@cache
def _digit_sets() -> tuple[str, ...]:
    """The ten digits of every script (Unicode category Nd), ASCII first."""
    sets: dict[int, list[str]] = {}
    for ch in _codepoints():
        if unicodedata.category(ch) == "Nd":
            zero = ord(ch) - unicodedata.digit(ch)
            sets.setdefault(zero, []).append(ch)
    return tuple("".join(v) for _, v in sorted(sets.items()) if len(v) == 10)


def _numbers(rng: random.Random) -> Iterator[pn.PhoneNumber]:
    regions = sorted(pn.SUPPORTED_REGIONS)
    while True:
        region = rng.choice(regions)
        number = pn.example_number_for_type(region, rng.choice(_TYPES))
        if number is not None:
            yield number


def _phone_form(rng: random.Random, number: pn.PhoneNumber, default_region: str) -> str:
    region = pn.region_code_for_number(number)
    metadata = pn.PhoneMetadata.metadata_for_region(region)
    trunk_zero = metadata is not None and metadata.national_prefix == "0"
    fmt = rng.choice(
        (pn.PhoneNumberFormat.NATIONAL,) * (3 if region == default_region else 0)
        + (pn.PhoneNumberFormat.INTERNATIONAL, pn.PhoneNumberFormat.E164)
    )
    text = pn.format_number(number, fmt)
    if fmt != pn.PhoneNumberFormat.NATIONAL and rng.random() < 0.3:
        text = "00" + text[1:]  # the international prefix instead of +
    if fmt == pn.PhoneNumberFormat.INTERNATIONAL and trunk_zero and rng.random() < 0.3:
        code, _, rest = text.partition(" ")
        text = f"{code} (0){rest}"  # the trunk prefix kept in brackets
    if fmt != pn.PhoneNumberFormat.E164:
        text = text.replace(" ", rng.choice(_SEPARATORS))
    if rng.random() < 0.1:
        text = _vanity(rng, text)
    digits = rng.choice(_digit_sets()) if rng.random() < 0.3 else "0123456789"
    text = "".join(digits[int(ch)] if ch in "0123456789" else ch for ch in text)
    if rng.random() < 0.3:
        text = rng.choice(_ANNOTATIONS).format(text)
    return _edges(rng, text)


def _vanity(rng: random.Random, text: str) -> str:
    """The number's last digits (up to 7, none of them 0 or 1) spelt as keypad letters."""
    out = list(text)
    spelt = 0
    for i in range(len(out) - 1, -1, -1):
        if spelt == 7 or out[i] in "01":
            break
        if out[i] in _KEYPAD:
            letter = rng.choice(_KEYPAD[out[i]])
            out[i] = letter.upper() if rng.random() < 0.5 else letter
            spelt += 1
    return "".join(out)


def phone_probes(
    default_region: str, targets: int, variants: int, seed: int = SEED
) -> Iterator[Probe]:
    """Probes for the `e164` normaliser with `default_region`."""
    rng = random.Random(f"{seed}:e164:{default_region}")
    numbers = _numbers(rng)
    seen: set[str] = set()
    while len(seen) < targets:
        number = next(numbers)
        target = pn.format_number(number, pn.PhoneNumberFormat.E164)
        if target in seen:
            continue
        seen.add(target)
        stored = tuple(_phone_form(rng, number, default_region) for _ in range(variants))
        yield Probe("e164", target, stored)
