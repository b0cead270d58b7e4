"""The plain-digit reader (`erasure.plain_phone`) gives exactly the parser's E.164 form.

The `e164` normaliser reads plain digits without phonenumbers; a number it got wrong would
hash to another tombstone (an erased person loaded again) or to someone else's (a stranger
dropped). So the normaliser is held to its reference path, every value through the parser,
over the shapes E.164 and ITU-T E.123 write numbers in, for many regions' numbers, and over
random digit strings: the same E.164 form, or the same refusal.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import phonenumbers as pn
import pytest
import yaml

from erasure.errors import SubjectError
from erasure.plain_phone import plain_reader
from erasure.pseudonym import normaliser, reference_e164

REGIONS = ("GB", "US", "DE", "FR", "IT", "NL", "IN", "AU", "BR", "JP", "GG", "AR", "MX", "RU")
DEFAULT_REGIONS = (*REGIONS, None, "gb", "XX", "001")  # lower case, unknown, non-geographic
DIGIT_ZEROS = ("\uff10", "\u0660", "\u06f0", "\u0966")  # fullwidth, Arabic-Indic, ...
CORPUS = Path(__file__).parent / "data" / "matching_corpus" / "phone.yaml"


def outcome(value: str, region: str | None, *, reference: bool) -> str:
    """The normalised form, or the refusal's message (never the value)."""
    try:
        if reference:
            return reference_e164(value, default_region=region)
        return normaliser("e164", region)(value)
    except SubjectError as refused:
        return f"refused: {refused}"


def assert_same_as_parser(values: list[tuple[str, str | None]]) -> int:
    """Each value normalises as the parser alone would; returns how many the plain reader took
    (so a test cannot pass by the reader declining everything)."""
    wrong = [
        (value, region, outcome(value, region, reference=False), expected)
        for value, region in values
        if outcome(value, region, reference=False)
        != (expected := outcome(value, region, reference=True))
    ]
    assert wrong == []
    return sum(plain_reader(region)(value) is not None for value, region in values)


def _examples() -> Iterator[tuple[str, pn.PhoneNumber]]:
    types = (pn.PhoneNumberType.FIXED_LINE, pn.PhoneNumberType.MOBILE)
    for region in REGIONS:
        for kind in (*types, pn.PhoneNumberType.TOLL_FREE):
            number = pn.example_number_for_type(region, kind)
            if number is not None:
                yield region, number


def _written(number: pn.PhoneNumber) -> Iterator[str]:
    """E.164 and E.123 shapes: international and national, with each separator, 00 for +,
    the country code without +, (0) after it, brackets round the area code."""
    intl = pn.format_number(number, pn.PhoneNumberFormat.INTERNATIONAL)
    national = pn.format_number(number, pn.PhoneNumberFormat.NATIONAL)
    e164 = pn.format_number(number, pn.PhoneNumberFormat.E164)
    nsn = pn.national_significant_number(number)
    for form in (
        intl,
        national,
        e164,
        f"00{e164[1:]}",
        e164[1:],
        f"+{number.country_code} (0){nsn}",
    ):
        yield form
        for separator in ("-", ".", "", "  ", " - "):
            yield form.replace(" ", separator)
        yield f" {form}\t"


def _mutated(text: str, rng: random.Random) -> Iterator[str]:
    """Near numbers: a digit changed, dropped or added (too short, too long)."""
    spots = [i for i, ch in enumerate(text) if ch.isdigit()]
    i = rng.choice(spots)
    yield text[:i] + str(rng.randrange(10)) + text[i + 1 :]
    yield text[:i] + text[i + 1 :]
    yield text + str(rng.randrange(10))
    yield text + "".join(str(rng.randrange(10)) for _ in range(6))


def test_every_written_shape_of_many_regions_numbers_reads_as_the_parser_reads_it() -> None:
    rng = random.Random(20261203)
    values: list[tuple[str, str | None]] = []
    for home, number in _examples():
        for text in _written(number):
            for region in (home, "GB", "US", None):
                values.append((text, region))
            for near in _mutated(text, rng):
                values.append((near, home))
    took = assert_same_as_parser(values)
    assert took > len(values) // 5  # the plain reader is exercised, not only declining


def test_what_is_not_plain_digits_goes_to_the_parser_and_reads_the_same() -> None:
    # Extensions, letters, brackets, annotations, other scripts' digits, a second number,
    # symbols the parser reads: never the plain reader's to decide.
    london = "020 7946 0958"
    shapes = [
        f"{london} ext. 12", f"{london} x12", f"{london} #5", f"{london};ext=9",
        "tel:+44-20-7946-0958", "(020) 7946 0958", "+44 (0)20 7946 0958", f"{london} (home)",
        "Tel: 020 7946 0958", "0800 FLOWERS", "0800-flowers", f"{london} / 020 7946 0000",
        "+44+20 7946 0958", "++44 20 7946 0958", "+44/20/7946/0958", "020_7946_0958",
        "020\u20137946\u20130958", "+44\u00a020 7946 0958", "\u200e07700 900123",
        "020 7946 0958,,12", "020 7946 0958;12", "*020 7946 0958", "020 7946 0958*",
        *("".join(chr(ord(z) + int(c)) if c.isdigit() else c for c in london) for z in DIGIT_ZEROS),
    ]  # fmt: skip
    values = [(shape, region) for shape in shapes for region in ("GB", "US", None)]
    assert_same_as_parser(values)
    for shape, region in values:
        if not shape.isascii() or any(ch.isalpha() or ch in "()#;,*/_+" for ch in shape[1:]):
            assert plain_reader(region)(shape) is None, "declined: the parser reads it"


def test_random_digit_strings_with_separators_read_as_the_parser_reads_them() -> None:
    rng = random.Random(17)
    prefixes = ("", "+", "0", "00", "011", "+0", "44", "1", "+44", "0044", "+1", "+49", "+39 0")
    values: list[tuple[str, str | None]] = []
    for _ in range(6000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 19)))
        chars: list[str] = []
        for ch in rng.choice(prefixes) + digits:
            chars.append(ch)
            if rng.random() < 0.2:
                chars.append(rng.choice([" ", ".", "-", "  "]))
        values.append(("".join(chars), rng.choice(DEFAULT_REGIONS)))
    took = assert_same_as_parser(values)
    assert took > len(values) // 10


def test_the_phone_corpus_reads_as_the_parser_reads_it() -> None:
    corpus = yaml.safe_load(CORPUS.read_text(encoding="utf-8"))
    values = [(e["value"], "GB") for e in corpus["stored"] if isinstance(e["value"], str)]
    values += [(t["request"], "GB") for t in corpus["targets"].values()]
    assert_same_as_parser(values)


@pytest.mark.parametrize(
    ("written", "region", "e164"),
    [
        ("020 7946 0958", "GB", "+442079460958"),
        ("+44 20 7946 0958", None, "+442079460958"),
        ("0044 20 7946 0958", "GB", "+442079460958"),
        ("07700-900-123", "GB", "+447700900123"),
        ("+1 212 555 0123", "GB", "+12125550123"),
        ("212.555.0123", "US", "+12125550123"),
        ("030 901820", "DE", "+4930901820"),
    ],
)
def test_plain_digits_are_read_without_the_parser(
    written: str, region: str | None, e164: str
) -> None:
    assert plain_reader(region)(written) == e164
    assert normaliser("e164", region)(written) == e164


@pytest.mark.parametrize(
    ("written", "region"),
    [
        ("020 7946 0958", None),  # national without a region: the parser refuses it
        ("44 20 7946 0958", "GB"),  # the country code without +: the parser weighs it
        ("+44 20 7946 0958 1234", "GB"),  # too long: not a possible number
        ("00 0 20 7946 0958", "GB"),  # 00 then 0: national digits to the parser
        ("1.5", "DE"),  # two digits apart: no phone number to the parser
        ("+39 06 6982 0000", "IT"),  # a leading zero the parser keeps
    ],
)
def test_what_the_parser_must_weigh_is_declined(written: str, region: str | None) -> None:
    assert plain_reader(region)(written) is None
    assert outcome(written, region, reference=False) == outcome(written, region, reference=True)
