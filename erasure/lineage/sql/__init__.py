"""Column lineage of SQL scripts (sqlglot): what a script writes, from which columns, and gaps.

`script` runs a script statement by statement; `statements` and `blocks` split it, and
`statement_parts` splits one that writes several tables; `trace` and `column_flow` follow a
query's columns (`column_refs` finds what each clause references, in which role),
`from_items` and `column_selectors` say which columns a FROM item and a COLUMNS(...) give,
`projection_names` names its outputs; `names`, `table_resolution`,
`known_tables`, `table_shards` and `field_paths` name tables and columns as the warehouse
would; `gaps` holds a gap's text and the kind it escalates as.
"""

from __future__ import annotations

from erasure.lineage.sql.gaps import SqlGap
from erasure.lineage.sql.known_tables import KnownTables
from erasure.lineage.sql.names import table_name
from erasure.lineage.sql.script import SqlColumnEdge, SqlLineage, sql_lineage, to_lineage_edges
from erasure.lineage.sql.statements import job_of, split_statements
from erasure.lineage.sql.table_resolution import Depth, TableName, TableNaming

__all__ = [
    "Depth",
    "KnownTables",
    "SqlColumnEdge",
    "SqlGap",
    "SqlLineage",
    "TableName",
    "TableNaming",
    "job_of",
    "split_statements",
    "sql_lineage",
    "table_name",
    "to_lineage_edges",
]
