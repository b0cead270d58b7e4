"""Free text is held to the same families of stored forms the matcher is (the standards'
families in tests/unit/matching_families.py): every form that *is* a target's identifier, in a
sentence, is refused, and so is every look-alike; no form of somebody else's is refused; the
refusal never carries the value.
"""

from __future__ import annotations

import pytest

from erasure.catalog import Catalog, load_catalog
from erasure.free_text import PERSONAL_DATA, NamesSubject, named_types, refuse_if_named
from erasure.model import Identity
from tests.unit.matching_families import EXACT, NEAR, Family, families

CATALOG = """
version: 1
identifiers:
  email: {normalise: email}
  customer_id: {normalise: strip}
  phone: {normalise: e164, default_region: GB}
datasets: []
"""

# Where a person puts an identifier in a sentence: alone, after a colon, in brackets, quoted,
# at the end of a sentence, and run on after a line break.
SENTENCES = (
    "{}",
    "The requester wrote from {} last week.",
    "contact: {}; asked twice",
    "(see {})",
    "«{}»",
    "Escalated after a call from {}.",
    "note\n{}\nend",
)

FAMILIES = families()


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    path = tmp_path_factory.mktemp("free-text") / "catalog.yaml"
    path.write_text(CATALOG)
    return load_catalog(path)


def _cases(fam: Family, wanted: str) -> list[tuple[str, str, str]]:
    """(form, target's request, why) for every form labelled `wanted` against a target."""
    return [
        (form.value, target.request, form.why)
        for form in fam.forms
        for target in fam.targets
        if form.label(target.name) == wanted
    ]


def _identity(fam: Family, request: str) -> Identity:
    target = next(t for t in fam.targets if t.request == request)
    return Identity(fam.id_type, fam.canonical(target))


@pytest.mark.parametrize("id_type", sorted(FAMILIES))
def test_every_form_of_the_identifier_is_refused_in_every_sentence(
    catalog: Catalog, id_type: str
) -> None:
    fam = FAMILIES[id_type]
    cases = _cases(fam, EXACT)
    assert len(cases) > 200, "the family generates its forms: none here means nothing checked"
    missed = [
        f"{why}: {sentence!r}"
        for value, request, why in cases
        for sentence in SENTENCES
        if not named_types(catalog, sentence.format(value), [_identity(fam, request)])
    ]
    assert not missed, f"{len(missed)} of {len(cases) * len(SENTENCES)} passed: {missed[:5]}"


@pytest.mark.parametrize("id_type", ["customer_id", "email"])  # phones: digits, no look-alikes
def test_every_look_alike_is_refused(catalog: Catalog, id_type: str) -> None:
    fam = FAMILIES[id_type]
    looks = [c for c in _cases(fam, NEAR) if "confusable" in c[2]]
    assert looks, "the family has confusables (UTS #39): none here means nothing checked"
    missed = [
        why
        for value, request, why in looks
        if not named_types(catalog, f"wrote from {value} today", [_identity(fam, request)])
    ]
    assert not missed, missed


@pytest.mark.parametrize("id_type", sorted(FAMILIES))
def test_no_form_of_somebody_else_is_refused(catalog: Catalog, id_type: str) -> None:
    fam = FAMILIES[id_type]
    others = [
        (form.value, target.request)
        for form in fam.forms
        for target in fam.targets
        if all(form.label(t.name) not in (EXACT, NEAR) for t in fam.targets)
    ]
    assert others
    refused = [
        value
        for value, request in others
        if named_types(catalog, f"wrote from {value} today", [_identity(fam, request)])
    ]
    assert not refused, refused[:5]


@pytest.mark.parametrize(
    "text",
    [
        "Spoke to JANE CANARY on the phone",
        "spoke to jane  canary",  # spacing
        "Mrs Canary asked",  # one part of the name, written as a name
        "Canary, Jane",
        "J\u0430ne asked for this",  # Cyrillic a
        "Jane\u200b Canary",  # zero-width space
        "lives at 14 Wharf Road",  # another personal-data column
    ],
)
def test_personal_data_from_the_rows_is_refused(catalog: Catalog, text: str) -> None:
    named = named_types(catalog, text, [], ["14 Wharf Road"], names=["Jane Canary"])
    assert named == [PERSONAL_DATA]


@pytest.mark.parametrize(
    "text",
    [
        "the requester asked twice",
        "Janet from legal",
        "canaryfish",
        "14 Wharf",
        "a canary in the mine",  # a part of a name, not written as one
        "Road works",  # a part of an address is not a name
    ],
)
def test_text_without_the_personal_data_is_kept(catalog: Catalog, text: str) -> None:
    assert named_types(catalog, text, [], ["14 Wharf Road"], names=["Jane Canary"]) == []


def test_the_refusal_never_carries_what_matched(catalog: Catalog) -> None:
    fam = FAMILIES["email"]
    for value, request, _ in _cases(fam, EXACT)[:50]:
        with pytest.raises(NamesSubject) as refused:
            refuse_if_named(
                catalog, "reason", f"from {value}", [_identity(fam, request)], names=["Jane"]
            )
        message = str(refused.value)
        assert value not in message and request not in message
        assert message.startswith("reason contains the subject's email:")
