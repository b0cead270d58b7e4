"""Free text a person types (a request reference, notes, a ruling's justification, an
extension's reason) is checked when it is entered: it must not name the subject.

Records are kept for years and read by auditors; their structured fields are typed (hashes,
dates, counts, catalog names) and cannot carry a subject value, so free text is the one way
an identifier could reach them. It is refused at entry, with a message that says which
field and which identifier type, never the value, and never after the erasure ran.

An identifier counts when it appears as a whole token, compared case- and
Unicode-insensitively: customer id `1` is named by "DSR-1" but not by "2026-12-01"; a phone
number is named in any format it can be written in.
"""

from __future__ import annotations

from collections.abc import Iterable

import phonenumbers

from erasure.catalog import Catalog
from erasure.errors import ErasureError
from erasure.model import Identity
from erasure.pseudonym import canonical_text, fold_case


class NamesSubject(ErasureError):
    """Free text names the subject; the message says which field and which identifier type."""


def refuse_if_named(
    catalog: Catalog, field: str, text: str | None, identities: Iterable[Identity]
) -> None:
    """Raise NamesSubject if `text` holds one of `identities` as a whole token."""
    if not text:
        return
    named = named_types(catalog, text, identities)
    if named:
        raise NamesSubject(
            f"{field} contains the subject's {', '.join(named)} as a word: it would be kept "
            f"in records and logs for years. Rewrite the {field} without it (describe the "
            "person by role or by the request, e.g. 'the requester')"
        )


def named_types(catalog: Catalog, text: str, identities: Iterable[Identity]) -> list[str]:
    """The identifier types of `identities` that `text` names, sorted."""
    folded = fold_case(canonical_text(text))
    named = set()
    for identity in identities:
        spec = catalog.identifiers.get(identity.type)
        if spec is not None and spec.normalise == "e164":
            if _names_phone(text, folded, identity.value, spec.default_region):
                named.add(identity.type)
        elif contains_token(folded, fold_case(identity.value)):
            named.add(identity.type)
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


def _names_phone(text: str, folded: str, e164: str, region: str | None) -> bool:
    """A phone number written in `text` in any format, or its digits as one token."""
    for match in phonenumbers.PhoneNumberMatcher(
        text, region, leniency=phonenumbers.Leniency.POSSIBLE
    ):
        if phonenumbers.format_number(match.number, phonenumbers.PhoneNumberFormat.E164) == e164:
            return True
    try:
        national = phonenumbers.national_significant_number(phonenumbers.parse(e164))
    except phonenumbers.NumberParseException:
        return False
    return any(contains_token(folded, d) for d in (e164.lstrip("+"), national, "0" + national))
