"""Which declared identifier type a typed value can be, read from the standard behind each
type's normaliser (catalog `identifiers`):

- `email`: an RFC 5322 addr-spec, UTF-8 allowed (RFC 6532): a dot-atom or quoted local part
  of at most 64 octets (RFC 5321), and a domain that is an IDNA host name or an address
  literal (`[192.0.2.1]`, `[IPv6:...]`); the forms the normaliser reads (`"Name" <a@b>`, a
  comment, `mailto:`, an ideographic full stop) count by the address they give;
- `e164`: a phone number as E.164 numbers are written (E.123, RFC 3966): digits of any
  script, a leading `+`, spaces, dots, dashes, parentheses, a `tel:` prefix and an extension
  (`;ext=`, `ext.`, `x`, `#`), no other letter; the normaliser must then read a number;
- `strip` and `lower`: an opaque id (letters, digits, `-`, `_`, ...). The catalog declares no
  pattern for it, so it refuses what no id holds (whitespace inside it, control characters)
  and what is plainly another declared type: an `@` when an email type is declared, a number
  written internationally (`+...`) that a declared phone type reads.

A value that cannot be of the type chosen is refused where it is typed (the desk, before
anything is sealed) and again at `register`: a customer id holding an address would be looked
for as a customer id, found nowhere, and a DPO confirming "not held" would sign a record
while the person's rows stay. Messages name the field and the types, never the value.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import idna

from erasure.catalog import IdentifierSpec
from erasure.errors import SubjectError
from erasure.pseudonym import canonical_text, normalise

Family = Literal["email", "phone", "opaque"]
FAMILY: dict[str, Family] = {
    "email": "email",
    "e164": "phone",
    "strip": "opaque",
    "lower": "opaque",
}
_NOUN = {"email": "an email address", "phone": "a phone number"}

_EMAIL_RULE = (
    "an email address is local@domain (RFC 5322): before the @ dot-separated words or a quoted "
    "text of at most 64 characters, after it a host name or an address in brackets"
)
_PHONE_RULE = (
    "a phone number is digits with an optional leading '+', spaces, dots, dashes, parentheses "
    "and an extension (';ext=' or 'ext.'), and no other letters (E.164, E.123, RFC 3966)"
)
_MAX_LOCAL_OCTETS = 64  # RFC 5321 section 4.5.3.1.1

# RFC 5322 atext: printable ASCII but the specials; RFC 6532 adds printable non-ASCII.
_ATEXT_ASCII = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-/=?^_`{|}~"
)
# E.123 and RFC 3966 writing of a number; `\d` is a decimal digit of any script.
_PHONE = re.compile(
    r"(?:tel:)?\(?\+?[\d\s().\-/]*\d[\d\s().\-/]*"
    r"(?:;ext=\d+|\s*(?:ext\.?|extension|x|#)\s*\d+)?",
    re.IGNORECASE,
)
_INTERNATIONAL = re.compile(r"(?:tel:)?\(?\+", re.IGNORECASE)


@dataclass(frozen=True)
class Fit:
    """Whether a typed value can be of the chosen identifier type; if not, why, and which
    declared types it plainly is (`looks_like`) or would fit as an opaque id (`could_be`)."""

    id_type: str
    problem: str | None = None  # what the chosen type refuses in it; None: it can be one
    looks_like: tuple[str, ...] = ()  # email or phone types it plainly is
    looks_like_family: Family | None = None  # theirs: one, as an address is never a number
    could_be: tuple[str, ...] = ()  # opaque types that would take it
    unknown_type: bool = False  # the chosen type is not declared (never echoed: may be data)

    @property
    def fits(self) -> bool:
        return self.problem is None

    def message(self) -> str:
        """What to change, naming the field and the types, never the value."""
        if self.unknown_type:
            return f"identifier_type: {self.problem}"
        chosen = _a(self.id_type)
        if self.looks_like_family is not None:
            return (
                f"identifier: this looks like {_NOUN[self.looks_like_family]}, not {chosen}: "
                "choose identifier type " + " or ".join(self.looks_like)
            )
        text = f"identifier: this cannot be {chosen}: {self.problem}"
        if self.could_be:
            text += f"; if it is {_a(' or '.join(self.could_be))}, choose that identifier type"
        return text


class WrongIdentifierType(SubjectError):
    """A typed value cannot be of the identifier type chosen; the message names the field and
    the types it looks like, never the value."""

    def __init__(self, fit: Fit) -> None:
        super().__init__(fit.message())
        self.fit = fit


def fit(identifiers: Mapping[str, IdentifierSpec], id_type: str, value: str) -> Fit:
    """Whether `value` can be of `id_type` as the catalog declares it; if not, which of the
    catalog's other types it plainly is or could be."""
    if id_type not in identifiers:
        return Fit(
            id_type,
            "not an identifier type of the catalog; allowed: " + ", ".join(sorted(identifiers)),
            unknown_type=True,
        )
    problem = _problem(identifiers, id_type, value)
    if problem is None:
        return Fit(id_type)
    families = {t: FAMILY[s.normalise] for t, s in identifiers.items()}
    fitting = [
        t for t in sorted(identifiers) if t != id_type and _problem(identifiers, t, value) is None
    ]
    # An opaque id holding an `@` is an address even when the address is malformed.
    plainly = set(_claimed(identifiers, id_type, value)) if families[id_type] == "opaque" else set()
    looks_like = sorted(plainly | {t for t in fitting if families[t] != "opaque"})
    return Fit(
        id_type,
        problem,
        looks_like=tuple(looks_like),
        looks_like_family=families[looks_like[0]] if looks_like else None,
        could_be=tuple(t for t in fitting if families[t] == "opaque"),
    )


def refuse_misfit(identifiers: Mapping[str, IdentifierSpec], id_type: str, value: str) -> None:
    """Raise WrongIdentifierType if `value` cannot be of `id_type` (see `fit`)."""
    verdict = fit(identifiers, id_type, value)
    if not verdict.fits:
        raise WrongIdentifierType(verdict)


def _problem(identifiers: Mapping[str, IdentifierSpec], id_type: str, value: str) -> str | None:
    """Why `value` cannot be of `id_type`; None if it can."""
    spec = identifiers[id_type]
    family = FAMILY[spec.normalise]
    if family == "email":
        return _email_problem(value)
    if family == "phone":
        return _phone_problem(value, spec.default_region)
    if _claimed(identifiers, id_type, value):
        return "it is plainly another identifier type"
    text = canonical_text(value)
    if any(ch.isspace() or unicodedata.category(ch) == "Cc" for ch in text):
        return f"{_a(id_type)} holds no spaces or control characters"
    return _unreadable(spec.normalise, value, spec.default_region)


def _claimed(identifiers: Mapping[str, IdentifierSpec], id_type: str, value: str) -> list[str]:
    """The email and phone types other than `id_type` that plainly claim `value`: any `@` for
    an email type, a number written internationally that the phone type reads."""
    text = canonical_text(value)
    claims = []
    for other, spec in sorted(identifiers.items()):
        family = FAMILY[spec.normalise]
        if other == id_type or family == "opaque":
            continue
        plainly = (
            "@" in text
            if family == "email"
            else bool(_INTERNATIONAL.match(text))
            and _phone_problem(value, spec.default_region) is None
        )
        if plainly:
            claims.append(other)
    return claims


def _email_problem(value: str) -> str | None:
    try:
        address = normalise("email", value)
    except SubjectError as exc:  # its messages never hold the value
        return str(exc)
    local, _, domain = address.rpartition("@")
    if (
        not (_dot_atom(local) or _quoted_string(local))
        or len(local.encode()) > _MAX_LOCAL_OCTETS
        or not _domain(domain)
    ):
        return _EMAIL_RULE
    return None


def _phone_problem(value: str, region: str | None) -> str | None:
    if not _PHONE.fullmatch(canonical_text(value)):
        return _PHONE_RULE
    return _unreadable("e164", value, region)


def _unreadable(kind: str, value: str, region: str | None) -> str | None:
    """The normaliser's own refusal (its messages never hold the value); None if it reads it."""
    try:
        normalise(kind, value, default_region=region)
    except SubjectError as exc:
        return str(exc)
    return None


def _atext(ch: str) -> bool:
    return ch in _ATEXT_ASCII if ch.isascii() else ch.isprintable() and not ch.isspace()


def _dot_atom(text: str) -> bool:
    """RFC 5322 dot-atom-text: atext runs joined by single dots."""
    return all(part and all(_atext(ch) for ch in part) for part in text.split("."))


def _quoted_string(text: str) -> bool:
    """RFC 5322 quoted-string (qtext, spaces and quoted pairs between double quotes)."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return False
    inner = text[1:-1]
    i = 0
    while i < len(inner):
        ch = inner[i]
        if ch == "\\":
            if i + 1 == len(inner) or not (inner[i + 1].isprintable() or inner[i + 1] == "\t"):
                return False
            i += 2
            continue
        if ch == '"' or not (ch.isprintable() or ch == "\t"):
            return False
        i += 1
    return True


def _domain(text: str) -> bool:
    """A host name (IDNA 2008 with UTS 46 mapping) or an RFC 5321 address literal."""
    if text.startswith("[") and text.endswith("]"):
        literal = text[1:-1]
        try:
            if literal[:5].lower() == "ipv6:":
                ipaddress.IPv6Address(literal[5:])
            else:
                ipaddress.IPv4Address(literal)
        except ValueError:
            return False
        return True
    try:
        idna.encode(text, uts46=True)
    except (idna.IDNAError, UnicodeError, ValueError):
        return False
    return True


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"
