"""Normalisation and the keyed hash (`erasure.pseudonym`): the hash that stands for a subject
in tombstones, key names and records is the one DESIGN section 5 specifies, stays the same for
every way a person's identifier is written, and changes with the pepper that keys it."""

from __future__ import annotations

import hashlib
import hmac
import random
from collections.abc import Callable

import pytest

from erasure.errors import SubjectError
from erasure.pseudonym import (
    Pepper,
    canonical_or_none,
    normalise,
    normaliser,
    reference_email,
    subject_hash,
)
from tests.unit.registry.support import CANARY, CANARY_NORMALISED

EMAIL = "pseudonym.canary.5d1e7b93a0@example.org"
PEPPER_V1 = Pepper(version=1, secret=b"pseudonym-test-pepper-v1-9f2c4e6a8b0d1f3e")
PEPPER_V2 = Pepper(version=2, secret=b"pseudonym-test-pepper-v2-17ac3be5d9f04c62")


def hashed(kind: str, value: str, *, default_region: str | None = None) -> str:
    """The subject hash of `value` as the workflow derives it: normalised, then keyed."""
    return subject_hash(PEPPER_V1, kind, normalise(kind, value, default_region=default_region))


def test_email_normalisation_matches_the_pseudonym_module() -> None:
    assert normalise("email", CANARY) == CANARY_NORMALISED


# ---------------------------------------------------------------------------------------------
# The keyed hash


def test_the_hash_is_hmac_sha256_of_type_colon_value_under_the_pepper() -> None:
    # The format other systems (CRM ingest, auditors' tools) recompute: DESIGN section 5.
    expected = hmac.new(PEPPER_V1.secret, f"email:{EMAIL}".encode(), hashlib.sha256).hexdigest()
    assert subject_hash(PEPPER_V1, "email", EMAIL) == expected
    assert len(expected) == 64 and set(expected) <= set("0123456789abcdef")


def test_the_same_subject_always_maps_to_the_same_hash() -> None:
    first = subject_hash(PEPPER_V1, "email", EMAIL)
    again = subject_hash(Pepper(version=1, secret=bytes(PEPPER_V1.secret)), "email", EMAIL)
    assert first == again


def test_another_pepper_version_gives_another_hash() -> None:
    # Why shred and verify must cover every pepper version that still has keys.
    assert subject_hash(PEPPER_V1, "email", EMAIL) != subject_hash(PEPPER_V2, "email", EMAIL)


def test_the_identifier_type_is_part_of_what_is_hashed() -> None:
    # A customer id that happens to equal someone's email is another subject.
    assert subject_hash(PEPPER_V1, "email", EMAIL) != subject_hash(PEPPER_V1, "customer_id", EMAIL)


def test_the_hash_and_the_pepper_never_show_the_secret_or_the_identifier() -> None:
    digest = subject_hash(PEPPER_V1, "email", EMAIL)
    assert "canary" not in digest
    assert PEPPER_V1.secret.decode() not in repr(PEPPER_V1)
    assert repr(PEPPER_V1) == "Pepper(version=1, secret=<redacted>)"


# ---------------------------------------------------------------------------------------------
# What normalisation makes one subject, and what it keeps apart


@pytest.mark.parametrize(
    "written",
    [
        "Pseudonym.Canary.5D1E7B93A0@Example.ORG",  # case
        "  pseudonym.canary.5d1e7b93a0@example.org\t\n",  # ASCII whitespace around it
        "\u200bpseudonym.canary.5d1e7b93a0@example.org\ufeff\u3000",  # invisible and CJK space
        "\u00a0pseudonym.canary.5d1e7b93a0@example.org\u2003",  # no-break and em space
        "PSEUDONYM.CANARY.5D1E7B93A0@EXAMPLE.ORG",
    ],
)
def test_every_way_of_writing_an_email_gives_the_same_hash(written: str) -> None:
    assert hashed("email", written) == subject_hash(PEPPER_V1, "email", EMAIL)


def test_unicode_case_folding_and_composition_make_one_subject() -> None:
    composed = "jos\u00e9.canary.3f8a61c0@example.org"
    decomposed = "jose\u0301.canary.3f8a61c0@example.org"
    assert hashed("email", decomposed) == hashed("email", composed)
    assert hashed("email", "JOS\u00c9.CANARY.3F8A61C0@EXAMPLE.ORG") == hashed("email", composed)
    # Full case folding, not lower(): sharp s is "ss", the Kelvin sign is k, fi ligature is fi.
    assert hashed("email", "stra\u00dfe.canary.3f8a61c0@example.de") == hashed(
        "email", "STRASSE.canary.3f8a61c0@example.de"
    )
    assert hashed("email", "\u212aaren.canary.3f8a61c0@example.org") == hashed(
        "email", "karen.canary.3f8a61c0@example.org"
    )
    assert hashed("email", "\ufb01nn.canary.3f8a61c0@example.org") == hashed(
        "email", "finn.canary.3f8a61c0@example.org"
    )


def test_what_nfkc_and_casefold_do_not_unify_stays_apart() -> None:
    # Compatibility forms are folded (NFKC): full-width letters typed by an IME are the text.
    assert hashed("email", "\uff41\uff4c\uff49.canary.3f8a61c0@example.org") == hashed(
        "email", "ali.canary.3f8a61c0@example.org"
    )
    # A look-alike of another script is not (it may be somebody else): Cyrillic a.
    assert hashed("email", "\u0430li.canary.3f8a61c0@example.org") != hashed(
        "email", "ali.canary.3f8a61c0@example.org"
    )
    # The dotless i is another letter, never the plain i of "istanbul".
    assert hashed("email", "\u0131stanbul.canary.3f8a61c0@example.tr") != hashed(
        "email", "istanbul.canary.3f8a61c0@example.tr"
    )
    # Whitespace inside the value is kept: only what surrounds it is dropped.
    assert hashed("email", "ali ce.canary.3f8a61c0@example.org") != hashed(
        "email", "alice.canary.3f8a61c0@example.org"
    )


@pytest.mark.parametrize("kind", ["email", "lower"])
def test_a_turkish_locales_dotted_capital_i_is_the_plain_i(kind: str) -> None:
    """A Turkish locale upper-cases `i` to `İ` (U+0130), which case folding makes `i` +
    COMBINING DOT ABOVE: the stored `İRMAK` is still `irmak`."""
    plain = "irmak.canary.3f8a61c0@example.org"
    for stored in (
        "\u0130RMAK.CANARY.3F8A61C0@EXAMPLE.ORG",  # precomposed İ
        "I\u0307RMAK.CANARY.3F8A61C0@EXAMPLE.ORG",  # I + COMBINING DOT ABOVE
        "i\u0307rmak.canary.3f8a61c0@example.org",  # what İ case-folds to
    ):
        assert normalise(kind, stored) == plain
        assert hashed(kind, stored) == hashed(kind, plain)
    # The dotless i stays another letter; strip keeps case and so the dotted capital.
    assert hashed(kind, "\u0131rmak.canary.3f8a61c0@example.org") != hashed(kind, plain)
    assert hashed("strip", "\u0130Z-3310") != hashed("strip", "IZ-3310")
    assert normalise("strip", "I\u0307Z-3310") == "\u0130Z-3310"


def test_strip_keeps_case_for_opaque_ids_but_composes_them() -> None:
    assert hashed("strip", "  CUST-canary-7a2b9e41 ") == hashed("strip", "CUST-canary-7a2b9e41")
    assert hashed("strip", "CUST-canary-7a2b9e41") != hashed("strip", "cust-canary-7a2b9e41")
    assert hashed("strip", "Ren\u00e9-7a2b9e41") == hashed("strip", "Rene\u0301-7a2b9e41")


def test_lower_folds_case_the_unicode_way() -> None:
    assert hashed("lower", "\u00c4RGER-canary-44d1") == hashed("lower", "\u00e4rger-canary-44d1")


@pytest.mark.parametrize(
    ("written", "region"),
    [
        ("+44 20 7946 0958", None),
        ("+44 (0)20 7946 0958", None),
        ("020 7946 0958", "GB"),
        ("020-7946-0958", "GB"),
        ("0044 20 7946 0958", "GB"),
        ("\uff10\uff12\uff10 \uff17\uff19\uff14\uff16 \uff10\uff19\uff15\uff18", "GB"),
        ("020 7946 0958 (home)", "GB"),
    ],
)
def test_every_format_of_a_phone_number_gives_its_e164_hash(
    written: str, region: str | None
) -> None:
    assert normalise("e164", written, default_region=region) == "+442079460958"
    assert hashed("e164", written, default_region=region) == subject_hash(
        PEPPER_V1, "e164", "+442079460958"
    )


# ---------------------------------------------------------------------------------------------
# What is refused, without echoing it


@pytest.mark.parametrize(
    ("kind", "value", "message"),
    [
        ("email", "no-at-sign-canary-61b0d2e9", "local@domain"),
        ("email", "two@at@canary-61b0d2e9", "local@domain"),
        ("email", "@canary-61b0d2e9.org", "local@domain"),
        ("email", "canary-61b0d2e9@", "local@domain"),
        ("strip", " \u200b\t ", "empty after normalisation"),
        ("lower", "\u3000", "empty after normalisation"),
        ("e164", "020 7946 0958", "set default_region"),  # national form, no region
        ("e164", "canary-61b0d2e9", "cannot be parsed"),
    ],
)
def test_a_malformed_identifier_is_refused_without_echo(
    kind: str, value: str, message: str
) -> None:
    with pytest.raises(SubjectError, match=message) as refused:
        normalise(kind, value)
    assert "61b0d2e9" not in str(refused.value)
    if value.strip():
        assert value.strip() not in str(refused.value)


def test_two_phone_numbers_in_one_value_are_refused() -> None:
    with pytest.raises(SubjectError, match="more than one phone number"):
        normalise("e164", "020 7946 0958 or 020 7946 0000 (work)", default_region="GB")


def test_an_unknown_normaliser_is_named_with_the_allowed_ones() -> None:
    with pytest.raises(SubjectError, match="unknown normaliser 'soundex'; allowed: email, strip"):
        normaliser("soundex")


def test_a_stored_value_that_names_nobody_has_no_canonical_form() -> None:
    canonical = canonical_or_none(normaliser("email"))
    assert canonical(None) is None
    assert canonical(b"pseudonym.canary.5d1e7b93a0@example.org") is None  # bytes name nobody
    assert canonical(memoryview(b"pseudonym.canary.5d1e7b93a0@example.org")) is None
    assert canonical("not an email canary-0c4d") is None  # malformed: no match, no error
    assert canonical(" Pseudonym.Canary.5d1e7b93a0@Example.org ") == EMAIL
    # A customer number stored as an integer is the same id as the text the DPO typed.
    assert canonical_or_none(normaliser("strip"))(4711) == normalise("strip", "4711")


# ---------------------------------------------------------------------------------------------
# The email normaliser's ASCII fast path gives what the general reader gives


def _email_outcome(read: Callable[[str], str], value: str) -> str:
    try:
        return read(value)
    except SubjectError as refused:
        return f"refused: {refused}"


def _email_shapes() -> list[str]:
    """ASCII addresses in the shapes RFC 5322 and exports write them, and near misses: case,
    whitespace (every ASCII space character), each character the RFC 5322 reader acts on,
    trailing and doubled dots, punycode labels in any case, `@` counts, display forms."""
    rng = random.Random(5322)
    bases = [
        "jane.doe@example.com", "Jane.Doe@Example.COM", "a@b", "x-y@xn--bcher-kva.example",
        "Q@XN--BCHER-KVA.example", "xn--a@b.c", "user+tag@sub.example.org", '"j d"@example.com',
        '"jane"@example.com', "jane@example.com.", "jane.@example.com", "jane..doe@example.com",
        "@example.com", "jane@", "jane@@example.com", "ja@ne@example.com", "no-at-sign",
        "Jane <jane@example.com>", "jane@example.com (Jane)", "mailto:jane@example.com",
        "jane@[192.0.2.1]", "j,ane@example.com", "j;ane@example.com", "j:ane@example.com",
        "j\\ane@example.com", "jane@exa mple.com", "", ".", "@", "a@.", "a.@b", "-@-",
        "jane@example.com\x00", "ja\x7fne@example.com",
    ]  # fmt: skip
    edges = ["", " ", "\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x1f"]
    shapes = list(bases)
    for base in bases:
        for _ in range(8):
            shapes.append(rng.choice(edges) + base + rng.choice(edges))
            chars = list(base)
            if chars:
                i = rng.randrange(len(chars))
                chars[i] = rng.choice('"<>()[]\\,;:. @-xX\t')
                shapes.append("".join(chars).swapcase())
    return shapes


def test_the_email_fast_path_gives_what_the_general_reader_gives() -> None:
    shapes = _email_shapes()
    email = normaliser("email")
    wrong = [
        (value, got, expected)
        for value in shapes
        if (got := _email_outcome(email, value))
        != (expected := _email_outcome(reference_email, value))
    ]
    assert wrong == []
    # The fast path is taken (lower-cased plain ASCII), not only declined.
    plain = [v for v in shapes if _email_outcome(email, v) == v.strip().lower()]
    assert len(plain) > 40
