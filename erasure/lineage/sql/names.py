"""The names SQL lineage writes: a table as the script spells it, and stand-ins for the rest.

Edges name columns `table.column`, with the table as written (`db.table`), lower-cased and
unquoted, so a schema key, a declared target and a table in the SQL meet under one name. Where
SQL lineage cannot name a table or a column it writes a stand-in, never a guess.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError

UNKNOWN_TABLE = "<unknown>"  # a source column whose table could not be resolved
OUTPUT_TABLE = "<output>"  # the target of a bare SELECT without a declared target
ALL_COLUMNS = "*"  # table-level lineage: `SELECT *` over a table the schema does not know


def table_name(table: exp.Table) -> str:
    """A table as written (`db.table`), lower-cased, without quotes; T-SQL's `#temp` kept."""
    parts = [part.name.lower() for part in table.parts]
    name = table.this
    if parts and isinstance(name, exp.Identifier):
        if name.args.get("global_"):
            parts[-1] = f"##{parts[-1]}"
        elif name.args.get("temporary"):
            parts[-1] = f"#{parts[-1]}"
    return ".".join(parts)


def table_key(name: str, dialect: Dialect) -> str:
    """A table named in text (a schema key, a declared target), spelled as `table_name`."""
    try:
        return table_name(exp.to_table(name, dialect=dialect))
    except SqlglotError:
        return name.strip().lower()
