"""erasure/identifier_types.py: which declared type a typed value can be, on values generated
from the standards' families rather than picked by hand:

- addresses (RFC 5322/6532 addr-spec): dot-atoms over the whole atext set, quoted local parts
  with spaces, `@` and quoted pairs, ASCII, IDNA Unicode and punycode domains, address
  literals, and the display forms the normaliser reads (`"Name" <...>`, `mailto:`, NFKC);
- phone numbers (E.164 as E.123 and RFC 3966 write them): every region's example number in
  E.164, international, national and `tel:` form, with dots, dashes, parentheses, extensions,
  fullwidth and other scripts' digits;
- opaque ids: letters of several scripts, digits, `-` and `_`.

Each family is checked against every declared type: it fits its own, is refused with the type
it looks like in the others, and no refusal repeats the value.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator

import phonenumbers as pn
import pytest

from erasure.catalog import IdentifierSpec
from erasure.identifier_types import Fit, WrongIdentifierType, fit, refuse_misfit
from erasure.pseudonym import canonical_text

IDENTIFIERS = {
    "email": IdentifierSpec(normalise="email"),
    "customer_id": IdentifierSpec(normalise="strip", one_per_person=True),
    "phone": IdentifierSpec(normalise="e164", default_region="GB"),
}
RNG_SEED = 5322

# ---------------------------------------------------------------------------------------------
# Generated families

ATEXT = string.ascii_letters + string.digits + "!#$%&'*+-/=?^_`{|}~"
UNICODE_LOCALS = ["zoë", "müller", "用户", "θσερ", "почта", "अजय", "ñandú"]
DOMAINS = [
    "example.com",
    "mail.example.co.uk",
    "sub-domain.example.org",
    "123.example.net",
    "bücher.example",
    "xn--bcher-kva.example",
    "例子.广告",
    "пример.рф",
    "corp.local",
    "[192.0.2.1]",
    "[IPv6:2001:db8::1]",
]


def fullwidth(text: str) -> str:
    """`text` in fullwidth forms (U+FF01-FF5E), which NFKC reads as ASCII."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def dot_atoms(rng: random.Random) -> Iterator[str]:
    """RFC 5322 dot-atom-text over the whole atext set, and RFC 6532 UTF-8 ones."""
    for start in range(0, len(ATEXT), 7):
        yield ATEXT[start : start + 7]
    for _ in range(40):
        words = ["".join(rng.choices(ATEXT, k=rng.randint(1, 8))) for _ in range(rng.randint(1, 4))]
        yield ".".join(words)
    yield from UNICODE_LOCALS


QUOTED_LOCALS = [
    '"john doe"',
    '"a@b"',
    '"very.(),:;<>[]\\".unusual"',
    '"back\\\\slash"',
    '" "',
    '"dots..inside"',
]


IDEOGRAPHIC_STOP = "\u3002"  # IDNA reads it as a dot (RFC 3490 section 3.1)


def addresses() -> Iterator[str]:
    rng = random.Random(RNG_SEED)
    locals_ = [*dot_atoms(rng), *QUOTED_LOCALS]
    for i, local in enumerate(locals_):
        domain = DOMAINS[i % len(DOMAINS)]
        address = f"{local}@{domain}"
        yield address
        # The forms the normaliser reads an address out of.
        yield [
            f"  {address.upper()} ",
            f'"Display Name" <{address}>',
            f"mailto:{address}",
            address if "[" in domain else f"{local}@{domain.replace('.', IDEOGRAPHIC_STOP)}",
            fullwidth(address),
        ][i % 5]


def not_addresses() -> Iterator[str]:
    """Each rule of the addr-spec broken once: unquoted specials and spaces, empty atoms, bad
    domains, a local part over 64 octets, no or two `@`."""
    for bad_local in ["john doe", "a..b", ".a", "a.", 'a"b', "a\\b", "a[b]", "x" * 65, "ü" * 33]:
        yield f"{bad_local}@example.com"
    for bad_domain in ["exa_mple.com", "-a.example", "a-.example", "a..example", "[300.1.1.1]"]:
        yield f"jane@{bad_domain}"
    yield from ["jane.example.com", "jane@", "@example.com", "a@b@example.com"]


REGIONS = sorted(r for r in pn.SUPPORTED_REGIONS if pn.example_number(r) is not None)


def written_forms(region: str) -> list[str]:
    """The region's example number as people write it."""
    number = pn.example_number(region)
    e164 = pn.format_number(number, pn.PhoneNumberFormat.E164)
    international = pn.format_number(number, pn.PhoneNumberFormat.INTERNATIONAL)
    return [
        e164,
        international,
        pn.format_number(number, pn.PhoneNumberFormat.RFC3966),
        pn.format_number(number, pn.PhoneNumberFormat.NATIONAL),
        international.replace(" ", "."),
        international.replace(" ", "-"),
        f"{international} ext. 12",
        f"{e164};ext=7",
        f"{international} x99",
        e164.translate(FULLWIDTH_DIGITS),
        e164.translate(ARABIC_INDIC_DIGITS),
    ]


FULLWIDTH_DIGITS = {ord(c): ord(c) + 0xFEE0 for c in "+0123456789"}  # NFKC reads them plain
ARABIC_INDIC_DIGITS = {ord("0") + d: 0x0660 + d for d in range(10)}


def catalog_for(region: str) -> dict[str, IdentifierSpec]:
    """The identifiers, with the phone type read in `region` (national forms need it)."""
    return {**IDENTIFIERS, "phone": IdentifierSpec(normalise="e164", default_region=region)}


def opaque_ids() -> Iterator[str]:
    """Customer ids: letters (several scripts), digits, '-' and '_', at least one letter."""
    rng = random.Random(RNG_SEED)
    alphabet = string.ascii_letters + string.digits + "-_" + "éßøЖж"
    for _ in range(200):
        body = "".join(rng.choices(alphabet, k=rng.randint(1, 20)))
        yield rng.choice(string.ascii_letters) + body
    yield from ["C0001", "CUST-wf-canary-81f0d3a6", "c_1", "ID-7731", fullwidth("123ABC")]


def assert_refused(verdict: Fit, value: str) -> str:
    """The refusal's message, checked never to repeat the value in any form."""
    assert not verdict.fits, value
    message = verdict.message()
    for form in {value, value.strip(), canonical_text(value), canonical_text(value).casefold()}:
        if len(form) >= 4:  # shorter ones are words of the message ("ext", "a@b")
            assert form not in message and form.casefold() not in message.casefold(), message
    return message


# ---------------------------------------------------------------------------------------------
# Addresses


@pytest.mark.parametrize("address", list(addresses()))
def test_every_addr_spec_is_an_email_and_only_an_email(address: str) -> None:
    assert fit(IDENTIFIERS, "email", address).fits, address
    for other in ("customer_id", "phone"):
        message = assert_refused(fit(IDENTIFIERS, other, address), address)
        assert message == (
            f"identifier: this looks like an email address, not a {other}: choose identifier "
            "type email"
        )


@pytest.mark.parametrize("value", list(not_addresses()))
def test_what_breaks_the_addr_spec_is_no_email(value: str) -> None:
    message = assert_refused(fit(IDENTIFIERS, "email", value), value)
    assert message.startswith("identifier: this cannot be an email: ")


def test_an_at_sign_in_a_customer_id_is_an_address_even_a_malformed_one() -> None:
    verdict = fit(IDENTIFIERS, "customer_id", "alice.smith@")
    assert verdict.looks_like == ("email",)
    # Without an email type declared nothing claims it: an opaque id may hold an `@`.
    ids_only = {"customer_id": IDENTIFIERS["customer_id"]}
    assert fit(ids_only, "customer_id", "alice.smith@example.com").fits


# ---------------------------------------------------------------------------------------------
# Phone numbers


@pytest.mark.parametrize("region", REGIONS)
def test_every_region_s_numbers_are_phones_in_every_written_form(region: str) -> None:
    identifiers = catalog_for(region)
    for number in written_forms(region):
        assert fit(identifiers, "phone", number).fits, number
        email = assert_refused(fit(identifiers, "email", number), number)
        assert "looks like a phone number, not an email: choose identifier type phone" in email


@pytest.mark.parametrize("region", REGIONS)
def test_an_international_number_in_a_customer_id_is_a_phone(region: str) -> None:
    for number in written_forms(region):
        verdict = fit(catalog_for(region), "customer_id", number)
        if number.removeprefix("tel:").startswith(("+", "\uff0b")) or " " in number:
            message = assert_refused(verdict, number)
            assert message.endswith("choose identifier type phone"), message
        else:  # digits alone (a national number without spaces) may be a numeric customer id
            assert verdict.fits, number


@pytest.mark.parametrize("region", REGIONS[::5])
def test_letters_in_a_phone_are_refused_naming_what_a_phone_holds(region: str) -> None:
    for number in written_forms(region):
        at = len(number) // 2
        for letters in ("O", "call ", " (home)", "I"):
            typed = number[:at] + letters + number[at:]
            message = assert_refused(fit(catalog_for(region), "phone", typed), typed)
            assert message.startswith("identifier: this cannot be a phone: a phone number is ")
            assert "no other letters" in message


def test_a_number_the_normaliser_cannot_read_says_how_to_write_it() -> None:
    message = assert_refused(fit(IDENTIFIERS, "phone", "12"), "12")
    assert "give it in international form (+...)" in message


# ---------------------------------------------------------------------------------------------
# Opaque ids


@pytest.mark.parametrize("customer_id", list(opaque_ids()))
def test_opaque_ids_are_customer_ids_and_said_to_be_one_elsewhere(customer_id: str) -> None:
    assert fit(IDENTIFIERS, "customer_id", customer_id).fits, customer_id
    for other in ("email", "phone"):
        message = assert_refused(fit(IDENTIFIERS, other, customer_id), customer_id)
        assert message.startswith(f"identifier: this cannot be an {other}: ") or message.startswith(
            f"identifier: this cannot be a {other}: "
        )
        assert message.endswith("; if it is a customer_id, choose that identifier type"), message


@pytest.mark.parametrize("inside", [" ", "\t", "\u00a0", "\u3000", "\n", "\x00", "\x1b", "\x7f"])
@pytest.mark.parametrize("customer_id", list(opaque_ids())[:200:40])
def test_whitespace_or_control_characters_inside_an_id_are_refused(
    inside: str, customer_id: str
) -> None:
    typed = customer_id[:1] + inside + customer_id[1:]
    message = assert_refused(fit(IDENTIFIERS, "customer_id", typed), typed)
    assert message == (
        "identifier: this cannot be a customer_id: a customer_id holds no spaces or control "
        "characters"
    )
    # Around it they are what the normaliser strips: the same id.
    assert fit(IDENTIFIERS, "customer_id", f" {customer_id}\t").fits


# ---------------------------------------------------------------------------------------------
# The catalog decides


def test_an_unknown_type_is_refused_without_repeating_it() -> None:
    with pytest.raises(WrongIdentifierType) as refused:
        refuse_misfit(IDENTIFIERS, "alice.smith@example.com", "C0001")
    assert str(refused.value) == (
        "identifier_type: not an identifier type of the catalog; allowed: customer_id, email, phone"
    )


def test_every_declared_type_of_a_family_is_named() -> None:
    identifiers = {
        **IDENTIFIERS,
        "work_email": IdentifierSpec(normalise="email"),
        "account_no": IdentifierSpec(normalise="lower"),
    }
    assert fit(identifiers, "customer_id", "jane@example.com").looks_like == ("email", "work_email")
    assert (
        fit(identifiers, "phone", "ACC-17")
        .message()
        .endswith("; if it is an account_no or customer_id, choose that identifier type")
    )
    with pytest.raises(WrongIdentifierType) as refused:
        refuse_misfit(identifiers, "email", "ACC-17")
    assert refused.value.fit.could_be == ("account_no", "customer_id")
