"""Identifier normalisation and the keyed hash that stands for a subject everywhere.

Each normaliser is defined here once: locate, erase, verify, relocate and the CRM ingest
filter all decide "this stored value is the subject" by comparing its canonical form (see
`erasure.matching` for how SQL is held to the same decision). The canonical forms follow how
real systems store identifiers:

- every normaliser drops default-ignorable and format characters (zero-width space and
  joiners, soft hyphen, bidi marks, byte-order mark) anywhere in the value and Unicode
  whitespace around it, and composes it by compatibility (NFKC), so a decomposed accent is
  the precomposed letter and a fullwidth letter is the plain one;
- `lower` and `email` fold case the Unicode way (casefold: `Ä` is `ä`, `ß` is `ss`), not
  only ASCII, and read the Turkish dotted capital `İ` as `i` (`İRMAK` is `irmak`; the dotless
  i, U+0131, stays another letter); `email` reads the address out of its RFC 5322 forms
  (`"Name" <a@b>`, comments, a quoted local part that needs no quotes, the domain's root dot,
  punycode labels, IDNA's ideographic full stops) and requires exactly one `@` with text on
  both sides;
- `e164` reads a phone number written in any national or international format, with
  spaces, dashes, dots, brackets, a leading 0 or 00, non-ASCII digits or a short annotation
  around it ("(home)"), and gives its E.164 form; an extension (`ext.`, `x`, `#`, `;ext=`)
  is part of the number, written RFC 3966 style: `+442079460958;ext=99`;
- `strip` keeps case: it is for opaque ids such as customer numbers.

`HMAC-SHA256(pepper_v, type || ":" || normalised)`: the pepper lives in Vault, is versioned
and is never shredded, so the same person always maps to the same tombstone.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

import phonenumbers

from erasure.errors import SubjectError
from erasure.plain_phone import plain_reader

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

# Default-ignorable code points (Unicode's Default_Ignorable_Code_Point, DerivedCoreProperties)
# and every format character (Cf): a renderer shows nothing for them, so wherever they sit in a
# value (soft hyphen, zero-width space/joiners, bidi marks, BOM, variation selectors, tags) the
# value is the one without them.
_DEFAULT_IGNORABLE_RANGES = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
    (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
    (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)  # fmt: skip
IGNORABLE_CHARACTERS = "".join(
    sorted(
        {chr(cp) for lo, hi in _DEFAULT_IGNORABLE_RANGES for cp in range(lo, hi + 1)}
        | {ch for ch in EDGE_CHARACTERS if unicodedata.category(ch) == "Cf"}
    )
)
_DROP_IGNORABLE = dict.fromkeys(map(ord, IGNORABLE_CHARACTERS))


def normalise(kind: str, value: str, *, default_region: str | None = None) -> str:
    """The canonical form of an identifier under normaliser `kind`; SubjectError if malformed."""
    return normaliser(kind, default_region)(value)


def normaliser(kind: str, default_region: str | None = None) -> Normaliser:
    """The function `normalise(kind, ...)` applies: pick it once when normalising many values."""
    if kind == "e164":
        return _e164_normaliser(default_region)
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise SubjectError(
            f"unknown normaliser {kind!r}; allowed: {', '.join(NORMALISERS)}"
        ) from None


def canonical_text(value: str) -> str:
    """`value` without default-ignorable or format characters anywhere, in compatibility
    composed form (NFKC: fullwidth, ligature and other compatibility forms read as the plain
    characters), without surrounding whitespace."""
    if value.isascii():  # the common case: nothing to compose or drop, ASCII whitespace only
        return value.strip()
    return unicodedata.normalize("NFKC", value.translate(_DROP_IGNORABLE)).strip(EDGE_CHARACTERS)


def fold_case(text: str) -> str:
    """Unicode caseless form of canonical text: full case folding (`ß` is `ss`, final sigma
    is sigma), composed again (NFKC), as Unicode's NFKC_Casefold does; and the dotted capital
    `İ` is `i`.

    Case folding makes `İ` an `i` with COMBINING DOT ABOVE (U+0307), which no other `i` has:
    but a stored `İRMAK` is `irmak` upper-cased by a Turkish locale, the same person. So the
    dot directly after an `i` is dropped (whether it came from `İ` or was typed). The dotless i
    (U+0131) stays another letter (a near miss)."""
    if text.isascii():
        return text.lower()
    folded = unicodedata.normalize("NFKC", text).casefold()
    return unicodedata.normalize("NFKC", _DOT_ABOVE_I.sub("i", folded))


# `i` and the COMBINING DOT ABOVE(s) right after it: what case folding makes of `İ`.
_DOT_ABOVE_I = re.compile("i\u0307+")


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
    if value.isascii():
        # Ingest runs this per row and column. An ASCII `local@domain` with nothing for the
        # RFC 5322 reader to do is its own canonical form lower-cased: reference_email's
        # conditions (ASCII canonical text is the value stripped, its case fold is lower()),
        # tested once on the folded text, where none of them depends on case.
        out = value.strip().lower()
        if (
            _NOT_PLAIN_ASCII_EMAIL.isdisjoint(out)
            and out.count("@") == 1
            and out[0] != "@"
            and out[-1] not in "@."
            and ".@" not in out
            and "xn--" not in out
        ):
            return out
    return reference_email(value)


def reference_email(value: str) -> str:
    """The `email` normaliser without its ASCII fast path."""
    # A plain `local@domain` in any script takes one pass of cheap checks.
    out = canonical_text(value)
    if (
        not _NOT_PLAIN_EMAIL.isdisjoint(out)
        or out.endswith(".")
        or ".@" in out
        or ("-" in out and _PUNYCODE.search(out))
    ):
        out = _addr_spec(out)
    out = fold_case(out)
    if out.count("@") != 1 or out[0] == "@" or out[-1] == "@":
        if out.startswith('"') and out.rpartition("@")[0]:
            return out  # a quoted local part may hold an `@` of its own
        raise SubjectError("the email identifier is not of the form local@domain")
    return out


# What makes an address more than `local@domain`: display forms, comments, quoting, a
# trailing dot, a `mailto:`, an ideographic full stop, a punycode label.
_NOT_PLAIN_EMAIL = frozenset(
    '"<>()[]\\,;:\u3002' + "".join(c for c in EDGE_CHARACTERS if c.isspace())
)
_NOT_PLAIN_ASCII_EMAIL = frozenset(ch for ch in _NOT_PLAIN_EMAIL if ch.isascii())
_PUNYCODE = re.compile(r"(?i:xn--)")
_DOT_ATOM = re.compile(r"[^\s\"(),.:;<>@\[\\\]]+(?:\.[^\s\"(),.:;<>@\[\\\]]+)*")
_MALFORMED = "the email identifier is not of the form local@domain"


def _addr_spec(text: str) -> str:
    """The address of an RFC 5322 form: `"Name" <a@b>`, `a@b (comment)`, `mailto:a@b`, a quoted
    local part that needs no quotes, a domain with its trailing root dot or in punycode."""
    if text[:7].lower() == "mailto:":
        text = text[7:]
    plain, angles, ats = _outside_quotes(text)
    if len(angles) > 1:
        raise SubjectError(_MALFORMED)
    if angles:
        start, end = angles[0]
        if any(not start < i < end for i in ats):
            raise SubjectError("the email identifier holds more than one address")
        text = text[start + 1 : end]
        plain, _, ats = _outside_quotes(text)
    if len(ats) != 1:
        raise SubjectError(_MALFORMED)
    at = ats[0]
    local = "".join(ch for i, ch in plain if i < at).strip()
    domain = "".join(ch for i, ch in plain if i > at).strip()
    if local.startswith('"') and local.endswith('"') and len(local) >= 2:
        inner = re.sub(r"\\(.)", r"\1", local[1:-1])
        local = (
            inner if _DOT_ATOM.fullmatch(inner) else '"' + re.sub(r'(["\\])', r"\\\1", inner) + '"'
        )
    domain = domain.replace("\u3002", ".")
    if domain.endswith(".") and not domain.endswith(".."):
        domain = domain[:-1]  # the root: `example.com.` is `example.com`
    if not domain.startswith("["):
        domain = ".".join(_u_label(label) for label in domain.split("."))
    return f"{local}@{domain}"


def _outside_quotes(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, int]], list[int]]:
    """The characters outside comments (position, character; quoted strings kept whole), the
    spans of angle brackets, and the positions of `@`, all outside quoted strings."""
    plain: list[tuple[int, str]] = []
    angles: list[tuple[int, int]] = []
    ats: list[int] = []
    quoted = escaped = False
    depth = 0
    opened: int | None = None
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\" and (quoted or depth):
            escaped = True
        elif depth:
            depth += {"(": 1, ")": -1}.get(ch, 0)
            continue
        elif ch == '"':
            quoted = not quoted
        elif not quoted and ch == "(":
            depth = 1
            continue
        elif not quoted and ch == "<":
            opened = i
        elif not quoted and ch == ">" and opened is not None:
            angles.append((opened, i))
            opened = None
        elif not quoted and ch == "@":
            ats.append(i)
        plain.append((i, ch))
    if quoted or depth:
        raise SubjectError(_MALFORMED)
    return plain, angles, ats


def _u_label(label: str) -> str:
    """A domain label in Unicode: a punycode A-label (`xn--...`) decoded (RFC 3492)."""
    if label[:4].lower() != "xn--":
        return label
    try:
        return label[4:].encode("ascii").decode("punycode")
    except (UnicodeError, ValueError):
        return label  # not valid punycode: compared as written


_PHONE_PARSE_ERROR = (
    "the phone identifier cannot be parsed: give it in international form (+...) "
    "or set default_region for the identifier type in the catalog"
)


def _e164_normaliser(default_region: str | None) -> Normaliser:
    read_plain = plain_reader(default_region)

    def e164(value: str) -> str:
        # Plain digits (`+44 20 7946 0958`, `020 7946 0958`) get the parser's answer without
        # the parser; anything the plain reader declines goes to it.
        plain = read_plain(value)
        if plain is not None:
            return plain
        return reference_e164(value, default_region=default_region)

    return e164


def reference_e164(value: str, *, default_region: str | None) -> str:
    """The `e164` normaliser without its plain-digit path: every value through phonenumbers."""
    # An annotation in brackets ("(home)") is no part of the number, and would hide an
    # extension written after it from the parser.
    text = _ANNOTATION.sub("", canonical_text(value)).strip()
    if not text.isascii():
        text = ascii_digits(text)  # the parser reads other scripts' digits, not in `;ext=`
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
        # Letters that were an extension's marker (`;ext=`) leave the parsed number as it is.
        marker = bool(
            found and number is not None and number.extension and _same_number(number, found[0])
        )
        if found and not marker and (number is None or phonenumbers.is_valid_number(found[0])):
            number = found[0]
    if number is None:
        raise SubjectError(_PHONE_PARSE_ERROR)
    if not number.extension and _EXTENSION.search(text):
        # An extension the parser did not read: never the number without it (the switchboard).
        raise SubjectError("the phone identifier has an extension that cannot be read")
    e164 = str(phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164))
    if number.extension:
        # The extension is part of the number (RFC 3966 `;ext=`): a switchboard and each
        # extension behind it are different people's numbers.
        return f"{e164};ext={ascii_digits(number.extension)}"
    return e164


_ANNOTATION = re.compile(r"\([^()]*[^\W\d_][^()]*\)")
_EXTENSION = re.compile(r"\bext\b|\bextension\b|;ext=|(?:\bx|#)\s*\d", re.IGNORECASE)


def ascii_digits(text: str) -> str:
    """`text` with the decimal digits of every script as ASCII digits."""
    return "".join(str(unicodedata.digit(ch)) if ch.isdecimal() else ch for ch in text)


def _same_number(a: phonenumbers.PhoneNumber, b: phonenumbers.PhoneNumber) -> bool:
    return a.country_code == b.country_code and a.national_number == b.national_number


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
