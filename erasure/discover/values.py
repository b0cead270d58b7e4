"""What sampled values say: a sample as counts, and whether a value is written as a phone
is dialled, an address with a mail domain, a whole number, or text an id is read from.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from collections import Counter
from dataclasses import dataclass

from erasure.pseudonym import canonical_or_none, normaliser

# A stored value is cut to this in SQL, and a longer one reads as no identifier: an address
# is at most 254 characters (RFC 5321), a number 15 digits.
MAX_VALUE_CHARS = 320


@dataclass
class _Sample:
    """Non-null values of each sampled column (as their counts), and the rows read."""

    rows: int
    values: dict[str, Counter[object]]
    others: dict[str, int]  # non-null values of no type an identifier is read from


# How E.123 and RFC 3966 write a number: digits with spaces, dots, dashes and brackets, an
# optional leading `+`, an optional extension. No slash or colon: those are dates and times.
_DIALLED = re.compile(r"\(?\+?[\d().\- ]*\d[\d().\- ]*", re.ASCII)
_EXTENSION = re.compile(r"\s*(?:;ext=|ext\.?|extension|x|#)\s*\d+$", re.IGNORECASE)
_DATE_SHAPE = re.compile(
    r"\d{1,2}[-. ]\d{1,2}[-. ]\d{2,4}|\d{4}[-. ]\d{1,2}[-. ]\d{1,2}"  # 01.02.2024, 2024-01-02
    r"|\d{5}-\d{4}"  # a ZIP+4 code
    r"|\d+\.\d+",  # a decimal number
    re.ASCII,
)


def _written_as_phone(text: str) -> bool:
    """Written as a number is dialled (E.123, RFC 3966): `tel:`, a leading `+` (or `(+`),
    `00` and a country code, a bracketed area code, or a trunk `0` followed by separators;
    never a bare digit string (an id, a ZIP code) or a date."""
    if text[:4].lower() == "tel:":
        return True
    digits = "".join(str(unicodedata.digit(c)) if c.isdecimal() else c for c in text)
    number = _EXTENSION.sub("", digits).strip()
    if not _DIALLED.fullmatch(number) or _DATE_SHAPE.fullmatch(number):
        return False
    if number.startswith(("+", "(+", "(")):
        return True
    if number.isdigit():
        return len(number) > 4 and number.startswith("00") and number[2] != "0"
    return number.startswith("0")


def _mail_domain(text: str) -> bool:
    """An address whose domain is a dotted host name (an IDN too), not an IP address or a
    bare host (`user@localhost`, `postgres@127.0.0.1`: logins, not a person's address)."""
    canonical = canonical_or_none(normaliser("email"))(text)
    if canonical is None:
        return False
    domain = canonical.rpartition("@")[2].rstrip(".")
    if "." not in domain or domain.startswith("["):
        return False
    return not all(label.isdigit() for label in domain.split("."))


def _whole(value: object) -> bool:
    """A whole number, stored as one or as a digit string (`42`, `0042`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return True
    return isinstance(value, str) and value.strip().isdecimal()


def _as_text(value: object) -> str | None:
    """A stored value an identifier can be read from, as text; None for any other."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return None
