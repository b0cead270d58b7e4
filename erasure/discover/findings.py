"""What discovery says of a column: a `Finding` (a status and the evidence as counts), and
what a run returns (`Discovery`, `UndeclaredCheck`).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from erasure.model import DatasetRef


class Status(StrEnum):
    PROPOSED = "proposed"  # its name or its values say so, and nothing says otherwise
    NAME_ONLY = "name_only"  # named like one, but its sampled values do not read as one
    VALUES_ONLY = "values_only"  # an opaque id's values are in a declared key; the name is mute
    OTHER_PARTY = "other_party"  # looks like one, but its name says it is another party's
    DECLARED_OTHER = "declared_other"  # declared as another type; its values read as this one
    BELOW_SHARE = "below_share"  # some sampled values read as one, fewer than min_share
    DECLARED = "declared"  # the catalog declares it already


# What undeclared_holders returns: columns that may hold the subject's identifiers where the
# catalog does not declare them (never another party's: declaring those would be the bug).
UNDECLARED = frozenset(
    {Status.PROPOSED, Status.NAME_ONLY, Status.VALUES_ONLY, Status.DECLARED_OTHER}
)


class NamedBy(StrEnum):
    """What a column's name is like, strongest last."""

    WORDS = "words"  # words that name an address or a number (`email`, `mobile`)
    TYPE_NAME = "type_name"  # the identifier type's own name (`customer_id`)
    DECLARED_COLUMN = "declared_column"  # a column the catalog declares for the type


class Finding(BaseModel):
    """A column and an identifier type it looks like, with the evidence as counts."""

    model_config = ConfigDict(frozen=True)

    dataset: DatasetRef  # as the catalog names it (its own entry's identity), else proposed
    column: str
    identifier_type: str
    status: Status
    named_by: NamedBy | None = None  # None: the name says nothing
    named_like: str | None = None  # what the name is like, for a person
    other_party: str | None = None  # the words of the name that say whose it is (`sales rep`)
    rows_sampled: int | None = None  # None: judged by name alone, no rows read
    values_sampled: int = 0  # non-null values in the rows sampled
    values_read: int = 0  # of those, read as the type (an opaque id: could be one)
    values_neutral: int = 0  # of those, whole numbers: no evidence either way
    found_in: str | None = None  # the declared key `dataset.column` most sampled ids were in
    keys_looked_in: int = 0  # declared key columns the sampled ids were looked up in
    ids_looked_up: int = 0  # distinct sampled values that could be ids, looked up
    ids_found: int = 0  # of those, found in `found_in`
    values_agree: bool = False  # at least min_share of the sampled values support it
    declared_as: list[str] = []  # identifier types the catalog declares this column for
    catalogued: bool = False  # the catalog has an entry of its own for the dataset
    described_by: str | None = None  # a catalog default or dbt manifest describes it
    handled_as: str | None = None  # what the catalog makes of it: `table, rebuilt by sql`
    evidence: str  # the above as a person reads it


class Discovery(BaseModel):
    """What `discover` found on one connection: findings, counts, and catalog YAML to review."""

    connection: str
    namespace: str  # the namespace proposed entries get (the connection's datasets')
    dialect: str
    schemas: list[str]  # searched
    tables: int  # tables and materialized views searched (a partitioned table once)
    columns: int  # columns examined: text, whole numbers, uuids (SQLite: also NUMERIC)
    sample_rows: int
    min_share: float
    findings: list[Finding]
    notes: list[str] = []  # what could not be read, and why
    catalog_yaml: str  # proposed entries, for a person to review and paste

    def having(self, *statuses: Status) -> list[Finding]:
        """The findings of these statuses, in the report's order."""
        return [f for f in self.findings if f.status in statuses]


class Skipped(BaseModel):
    """A dataset `check_undeclared_holders` could not look at, and why (never a value)."""

    dataset: DatasetRef
    reason: str


class UndeclaredCheck(BaseModel):
    """Columns that look like undeclared identifiers, and the datasets that were not checked."""

    findings: list[Finding]
    skipped: list[Skipped] = []  # its connection cannot be opened or its schema read
    notes: list[str] = []  # read, but not wholly: a table not sampled, a lookup not made
