"""Where subjects live: columns of a warehouse that look like identifiers of the catalog's
types, proposed as `holds_subject` entries for a person to accept (`erasure catalog discover`).

A column is judged for an identifier type by what it is called and by what it holds:

- its name: words that name an address or a number (`email`, `e_mail`, `mail`, `phone`,
  `mobile`, `msisdn`, `tel`), the identifier type's own name (`customer_id`), or the name of a
  column the catalog already declares for the type (`crm.orders.customer_id`; a name that says
  nothing of whose it is, such as `id`, only in a table named alike). A name that says it is a
  fact about the identifier (`email_verified`, `phone_type`, `email_hash`) is no evidence, and
  a name that says whose it is, when that is not the row's subject (`sales_rep_email`,
  `supplier_phone`, `referred_by_customer_id`: OTHER_PARTY_WORDS), makes it another party's;
- its values, read from at most `sample_rows` rows (one bounded query per table, each value
  cut to MAX_VALUE_CHARS in SQL): the share of non-null values that the type's normaliser
  reads (`identifier_types.fit`). An address needs a domain with a dot that is no IP address
  (`user@localhost` is a login); a phone must be written as one is dialled (E.123: `+`, `00`
  and a country code, a bracketed area code, or a trunk `0` with separators; no date shape),
  since the normaliser reads any possible number and ids, ZIP codes and dates are possible
  numbers. Whole numbers (an integer, a digit string) are no evidence of a phone or an opaque
  id either way. An opaque id (`strip`, `lower`) has no form to recognise: its values count
  only when they are found in a declared column that is a primary key or unique (an `IN`
  list of bound values; at most MAX_IDS_LOOKED_UP per column and MAX_KEY_LOOKUPS per run).

A column is proposed when its name or its values say so and nothing says otherwise, except
that an opaque id's values alone never propose it (`values_only`: any id-shaped code can be
in a key's range) and another party's column is never proposed (`other_party`). Those, and a
column named like one whose values disagree, are shown and left out of the YAML.

Discovery reads through connections of its own (never the warehouse's pool): read-only
(SQLite files opened `mode=ro`, `query_only`; a Postgres session `READ ONLY`), closed at the
end of the run. Evidence is counts, never values: nothing sampled reaches the report, a log
or an exception (a failure is described by its class and code), and every statement that
carries a sampled value binds it as a parameter. What is proposed is for a person to check:
a column in `holds_subject` is searched and erased for every reque

Rooms behind this door: `runs` (`discover`, `check_undeclared_holders`) · `findings` (what a
run says) · `names` (what a column's name says) · `values` (what sampled values say) ·
`judge` (a column judged, type by type) · `reading` (read-only connections, reflection,
keys, lookups) · `tables` (what a connection's search reads) · `sampling` (bounded
samples) · `proposal` (the catalog YAML) · `report` (the text a person reads).
"""

from __future__ import annotations

from erasure.discover.findings import (
    UNDECLARED,
    Discovery,
    Finding,
    NamedBy,
    Skipped,
    Status,
    UndeclaredCheck,
)
from erasure.discover.judge import MAX_IDS_LOOKED_UP, MAX_KEY_LOOKUPS
from erasure.discover.names import OTHER_PARTY_WORDS
from erasure.discover.report import render_discovery
from erasure.discover.runs import (
    DEFAULT_MIN_SHARE,
    DEFAULT_SAMPLE_ROWS,
    MAX_SAMPLE_ROWS,
    check_undeclared_holders,
    discover,
    undeclared_holders,
)
from erasure.discover.values import MAX_VALUE_CHARS

__all__ = [
    "DEFAULT_MIN_SHARE",
    "DEFAULT_SAMPLE_ROWS",
    "MAX_IDS_LOOKED_UP",
    "MAX_KEY_LOOKUPS",
    "MAX_SAMPLE_ROWS",
    "MAX_VALUE_CHARS",
    "OTHER_PARTY_WORDS",
    "UNDECLARED",
    "Discovery",
    "Finding",
    "NamedBy",
    "Skipped",
    "Status",
    "UndeclaredCheck",
    "check_undeclared_holders",
    "discover",
    "render_discovery",
    "undeclared_holders",
]
