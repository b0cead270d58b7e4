"""What a column's name says: its words, the words of an identifier, of a fact about one and
of another party, and the index of the columns the catalog declares by their names' words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from erasure.catalog import DatasetSpec
from erasure.identifier_types import Family

_WORDS: dict[Family, frozenset[str]] = {
    "email": frozenset({"email", "emails", "emailaddress", "mail", "mailaddress"}),
    "phone": frozenset({
        "phone", "phones", "phonenumber", "telephone", "tel", "mobile", "msisdn", "cell",
        "cellphone", "landline",
    }),
}  # fmt: skip
_NOUNS: dict[Family, str] = {"email": "an email address column", "phone": "a phone number column"}
# Words that make a column a fact about an identifier, not the identifier.
_FACT_WORDS = frozenset({
    "allowed", "bounced", "confirmed", "consent", "count", "country", "digest", "domain",
    "enabled", "ext", "extension", "flag", "format", "has", "hash", "hashed", "is", "kind", "md5",
    "opt", "optin", "optout", "preference", "prefix", "provider", "sent", "sha1", "sha256",
    "status", "template", "type", "valid", "validated", "verified",
})  # fmt: skip
# Names that do not say whose key they are: like a declared one only in a table named alike.
_GENERIC_WORDS = frozenset({
    "id", "key", "pk", "uid", "uuid", "guid", "code", "ref", "reference", "no", "num", "number",
    "value", "name", "identifier",
})  # fmt: skip
# Words that say a column is another party's: the row is about someone, and the column names
# a different party who acts on the row or is related to it (as CRM, ticketing, commerce, HR
# and audit schemas name them). Declared as the subject's, a request by that party would
# erase the rows they touched (every order a sales rep handled). A word that names what the
# table's rows are (`supplier_phone` in `suppliers`) or the identifier type itself
# (`employee_id` for an `employee_id` type) does not count.
OTHER_PARTY_WORDS: dict[str, frozenset[str]] = {
    # who did it: created_by, updated_by, approved_by, referred_by, invited_by
    "an actor": frozenset({"by"}),
    # staff and roles acting on the row (Salesforce OwnerId, Zendesk assignee_id, CRM reps)
    "staff": frozenset({
        "rep", "reps", "salesrep", "agent", "manager", "mgr", "supervisor", "employee", "staff",
        "operator", "admin", "administrator", "approver", "reviewer", "assignee", "assigned",
        "owner", "handler", "recruiter", "interviewer", "clerk", "cashier", "teller", "advisor",
        "adviser", "consultant", "creator", "editor", "modifier", "updater",
    }),
    # counterparties and the organisation's own addresses
    "a counterparty": frozenset({
        "supplier", "vendor", "merchant", "seller", "reseller", "partner", "carrier", "courier",
        "driver", "contractor", "affiliate", "dealer", "distributor", "manufacturer", "shipper",
        "broker", "landlord", "insurer", "support", "helpdesk", "noreply", "store", "shop",
        "branch",
    }),
    # other people related to the row's person
    "a related person": frozenset({
        "referrer", "referral", "referee", "referred", "referring", "inviter", "invitee",
        "invited", "sponsor", "guarantor", "cosigner", "guardian", "parent", "spouse", "kin",
        "emergency", "beneficiary", "witness", "nominee", "dependant", "dependent",
    }),
}  # fmt: skip
# Not in the lists, because in most schemas they name the row's own person: `user`
# (`users.email`, `clicks.user_email`), `contact`, `customer`, `billing`, `shipping`, `work`,
# `home`, `primary`, `alt`; and `sender`, `recipient`, `author`, `requester` (a message's or a
# ticket's recipient or author is often the subject). A reviewer dismisses those by hand.
_OTHER_PARTY = {word: kind for kind, words in OTHER_PARTY_WORDS.items() for word in words}
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")


@lru_cache(maxsize=8192)
def _words(name: str) -> tuple[str, ...]:
    """`contactEmail`, `contact_email`, `Contact-Email` -> ("contact", "email")."""
    return tuple(w for w in _WORD_SPLIT.split(_CAMEL.sub(r"\1_\2", name).lower()) if w)


def _holds_words(words: tuple[str, ...], part: tuple[str, ...]) -> bool:
    return any(words[i : i + len(part)] == part for i in range(len(words) - len(part) + 1))


# Words that say a name is a key (`customer_no`, `customer_ref` for a `customer_id` type).
_KEY_WORDS = _GENERIC_WORDS - {"name", "value"}


def _names_key_of(words: tuple[str, ...], own: tuple[str, ...]) -> bool:
    """Whether a name is an opaque type's own words then a key word: `customer_no`,
    `customerNumber`, `customer_ref` for `customer_id` (not `customer_name`)."""
    part = tuple(w for w in own if w not in _GENERIC_WORDS)
    if not part:
        return False
    return any(
        words[i : i + len(part)] == part and words[i + len(part)] in _KEY_WORDS
        for i in range(len(words) - len(part))
    )


@lru_cache(maxsize=8192)
def _table_words(name: str) -> tuple[str, ...]:
    """A table's own name (no schema) as words, a plural `s` dropped: `customers` ~ `customer`."""
    words = _words(name.rpartition(".")[2])
    return (*words[:-1], words[-1].removesuffix("s")) if words else words


def _other_party(
    words: tuple[str, ...], table: tuple[str, ...], own: tuple[str, ...], family: Family
) -> str:
    """Whose a column's name says it is, when another party's: the words around the
    identifier's (`account manager` of `account_manager_email`); "" if not another party's."""
    mine = set(table) | set(own) | {w.removesuffix("s") for w in (*table, *own)}
    if not any(w in _OTHER_PARTY and w not in mine for w in words):
        return ""
    said = set(own) | _KEY_WORDS | (_WORDS[family] if family != "opaque" else frozenset())
    return " ".join(w for w in words if w not in said)


@dataclass(frozen=True)
class _Holder:
    """A column the catalog declares for an identifier type."""

    dataset: DatasetSpec
    column: str

    @property
    def label(self) -> str:
        return f"{self.dataset.name}.{self.column}"


def _name_key(column: str, table: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """How a declared column's name is indexed: its words, and for a name that says nothing
    of whose it is (`id`) its table's words too."""
    words = _words(column)
    return words, (_table_words(table) if set(words) <= _GENERIC_WORDS else ())
