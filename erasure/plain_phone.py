"""The E.164 form of a phone number written as plain ASCII digits, without the general parser.

CRM exports mostly hold numbers as `+44 20 7946 0958`, `0044 20 7946 0958` or `020 7946 0958`:
digits with spaces, dashes or dots, and at most one `+`, in front. For those `phonenumbers.parse`
(text extraction, extensions, letters, an object per number) costs tens of microseconds a
value; this module takes the parser's decisions from the same region metadata on the digits
alone: international prefix, country calling code, national prefix, possible lengths.
Anything else (brackets, letters, other scripts' digits, a region whose national prefix
carries a carrier code or is rewritten, a number that keeps a leading zero, a number the
parser would refuse or find impossible) gets None, and the caller asks the parser: the fast
answer is never a guess. `tests/unit/test_plain_phone.py` holds it to the parser's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import phonenumbers
from phonenumbers import COUNTRY_CODE_TO_REGION_CODE, PhoneMetadata, region_code_for_country_code

PlainReader = Callable[[str], "str | None"]
"""Stripped text -> its E.164 form, or None where the parser must read it."""

_MIN_NSN, _MAX_NSN = 2, 17  # phonenumbers' bounds on a national significant number
_MAX_INPUT = 250  # phonenumbers refuses longer input outright

# What phonenumbers' `_test_number_length` says of a national number of a given length
# (possible and local-only first: `is_possible_number` accepts either).
_POSSIBLE, _LOCAL_ONLY, _TOO_SHORT, _TOO_LONG, _INVALID = range(5)
_KEEPS_STRIPPED = (_POSSIBLE, _TOO_LONG)  # parse() keeps a national prefix off for these


class _Prefix:
    """A metadata prefix pattern matched at the start of digits, as `re.match` would. A
    pattern that is only digit strings joined by `|` keeps them in `literals`, to be tried in
    order (the first that matches wins, as in the regex) without the regex engine."""

    __slots__ = ("literals", "pattern")

    def __init__(self, pattern: str) -> None:
        alternatives = tuple(pattern.split("|"))
        literal = all(a.isdigit() and a.isascii() for a in alternatives)
        self.literals = alternatives if literal else None
        self.pattern = None if literal else re.compile(pattern)

    def end(self, digits: str) -> int:
        """Where the prefix `digits` start with ends; -1 if they do not start with one."""
        if self.literals is not None:
            for literal in self.literals:
                if digits.startswith(literal):
                    return len(literal)
            return -1
        assert self.pattern is not None
        found = self.pattern.match(digits)
        return -1 if found is None else found.end()


@dataclass(frozen=True, slots=True)
class _Plan:
    """What the parser reads from one region's metadata, compiled once."""

    country_code: str
    idd: _Prefix | None  # international prefix dialled from this region
    national_prefix: _Prefix | None
    general: re.Pattern[str] | None  # the region's national number pattern
    length: tuple[int, ...]  # verdict by length, 0.._MAX_INPUT


@cache
def plain_reader(default_region: str | None) -> PlainReader:
    """The reader for numbers of `default_region` (written without a country code): it takes
    the value as stored, and strips it as the normaliser does."""
    home = _region_plan(default_region) if default_region is not None else None
    home_possible = _code_plan(home.country_code) if home is not None else None
    home_idd = home.idd if home is not None else None
    literals = home_idd.literals if home_idd is not None else None
    home_idd_literal = literals[0] if literals is not None and len(literals) == 1 else None

    def read(value: str) -> str | None:
        if not value.isascii():
            return None
        text = value.strip()
        if not text or len(text) > _MAX_INPUT:
            return None
        plus = text[0] == "+"
        digits = text[1:] if plus else text
        if " " in digits:
            digits = digits.replace(" ", "")
        if "-" in digits:
            digits = digits.replace("-", "")
        if "." in digits:
            digits = digits.replace(".", "")
        # ASCII (checked above), so isdigit() is 0-9; three digits at least: the parser
        # takes two only when written together.
        if len(digits) < 3 or not digits.isdigit():
            return None
        if plus:
            return _international(digits)
        if home is None or home_possible is None:
            return None
        if home_idd is not None:
            if home_idd_literal is not None:  # the common case, "00" or "011"
                idd = len(home_idd_literal) if digits.startswith(home_idd_literal) else -1
            else:
                idd = home_idd.end(digits)
            if idd >= 0:
                rest = digits[idd:]
                # An international prefix followed by 0 stays national digits for the parser.
                return _international(rest) if rest[:1] not in ("0", "") else None
        if digits.startswith(home.country_code):
            return None  # the parser weighs reading these as the country code without +
        return _national(digits, home, home_possible)

    return read


def _international(digits: str) -> str | None:
    """`digits` after `+` or an international prefix: country calling code, then the number."""
    if len(digits) <= _MIN_NSN or digits[0] == "0":
        return None
    for size in (1, 2, 3):
        code = digits[:size]
        if int(code) in COUNTRY_CODE_TO_REGION_CODE:
            plan = _code_plan(code)
            return None if plan is None else _national(digits[size:], plan, plan)
    return None


def _national(digits: str, plan: _Plan, possible: _Plan) -> str | None:
    """`+cc` and the national significant number the parser makes of national `digits`
    under `plan`, if `possible` (the country code's main region) finds it a possible number."""
    if len(digits) < _MIN_NSN:
        return None
    nsn = digits
    prefix = -1
    national_prefix = plan.national_prefix
    if national_prefix is not None:
        literals = national_prefix.literals
        if literals is None:
            prefix = national_prefix.end(digits)
        else:  # inline: this runs for every national number
            for literal in literals:
                if digits.startswith(literal):
                    prefix = len(literal)
                    break
    if prefix >= 0:
        stripped = digits[prefix:]
        # Dropped unless that spoils a number that fitted the pattern, and only if what
        # remains has a possible length (or is too long).
        general = plan.general
        if plan.length[len(stripped)] in _KEEPS_STRIPPED and (
            general is None
            or general.fullmatch(stripped) is not None
            or general.fullmatch(digits) is None
        ):
            nsn = stripped
    if len(nsn) > _MAX_NSN or nsn[0] == "0":
        return None  # the parser refuses it, or keeps leading zeros by rules of its own
    if possible.length[len(nsn)] > _LOCAL_ONLY:
        return None  # not a possible number: the parser's caller decides what it is
    return "+" + plan.country_code + nsn


@cache
def _region_plan(region: str) -> _Plan | None:
    """The plan of a default region; None where the parser refuses the region."""
    if region not in phonenumbers.SUPPORTED_REGIONS:
        return None
    metadata = PhoneMetadata.metadata_for_region(region.upper(), None)
    return None if metadata is None else _plan(metadata)


@cache
def _code_plan(country_code: str) -> _Plan | None:
    """The plan of a country calling code's main region: the parser reads a number with
    this code under it, and its possible lengths decide whether any such number is possible."""
    code = int(country_code)
    metadata = PhoneMetadata.metadata_for_region_or_calling_code(
        code, region_code_for_country_code(code)
    )
    return None if metadata is None else _plan(metadata)


def _plan(metadata: PhoneMetadata) -> _Plan | None:
    """None where the national prefix is more than a prefix to drop (rewritten, or carrying a
    carrier code), or the metadata has no possible lengths."""
    national_prefix = None
    if metadata.national_prefix_for_parsing:
        if metadata.national_prefix_transform_rule:
            return None
        national_prefix = _Prefix(metadata.national_prefix_for_parsing)
        if national_prefix.pattern is not None and national_prefix.pattern.groups:
            return None
    general = metadata.general_desc
    if general is None or not general.possible_length:
        return None
    pattern = general.national_number_pattern
    return _Plan(
        country_code=str(metadata.country_code),
        idd=_Prefix(metadata.international_prefix) if metadata.international_prefix else None,
        national_prefix=national_prefix,
        general=re.compile(pattern) if pattern else None,
        length=tuple(
            _length_verdict(n, general.possible_length, general.possible_length_local_only or ())
            for n in range(_MAX_INPUT + 1)
        ),
    )


def _length_verdict(n: int, lengths: tuple[int, ...], local_only: tuple[int, ...]) -> int:
    """phonenumbers' `_test_number_length` for an unknown type, in its order of checks."""
    if n in local_only:
        return _LOCAL_ONLY
    if n == lengths[0]:
        return _POSSIBLE
    if n < lengths[0]:
        return _TOO_SHORT
    if n > lengths[-1]:
        return _TOO_LONG
    return _POSSIBLE if n in lengths[1:] else _INVALID
