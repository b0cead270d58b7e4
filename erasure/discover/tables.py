"""The tables a connection's search reads: the schemas searched, their tables and
materialized views (a partition through its partitioned table), and those the catalog
cannot name left out, each said in the notes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine.reflection import ObjectKind

from erasure.catalog import shown_name
from erasure.discover.judge import _Context
from erasure.discover.reading import _end_transaction, _Table
from erasure.discover.sampling import _pg_relations, _sample_percent
from erasure.errors import WarehouseError, describe_failure

_SYSTEM_SCHEMAS = frozenset({"information_schema", "temp"})


def _tables(
    context: _Context,
    connection: str,
    schemas: Sequence[str] | None,
    exclude: Sequence[str],
    sample_rows: int,
) -> tuple[list[str], list[_Table]]:
    """The schemas searched and their tables and materialized views (views hold no rows of
    their own; a partition is read through its partitioned table)."""
    reader = context.reader
    conn = reader.open(connection)
    try:
        inspector = sa.inspect(conn)
        default = inspector.default_schema_name
        files = reader.sqlite_files(connection)
        if files is not None:
            present = ["main", *files]
        else:
            present = [
                s
                for s in inspector.get_schema_names()
                if s.lower() not in _SYSTEM_SCHEMAS and not s.lower().startswith("pg_")
            ]
        if schemas:
            wanted = {s.lower() for s in schemas}
            missing = sorted(wanted - {s.lower() for s in present})
            if missing:
                raise WarehouseError(
                    f"connection {connection!r} has no schema "
                    f"{', '.join(shown_name(s, '(a name not repeated)') for s in missing)}; "
                    f"its schemas: {_schema_list(present)}"
                )
            present = [s for s in present if s.lower() in wanted]
        dropped = {s.lower() for s in exclude}
        kept = [s for s in present if s.lower() not in dropped]
        if not schemas:
            # A per-user schema may be named with an address or a number: not repeated in a
            # report, so not searched unless asked for by name.
            unnamed = [s for s in kept if not shown_name(s, "")]
            kept = [s for s in kept if shown_name(s, "")]
            if unnamed:
                context.notes.append(
                    f"{len(unnamed)} schema(s) not searched: each name may be an identifier "
                    "(an address, a number), which this report does not repeat; search one "
                    "by giving its name to --schema"
                )
        searched = []
        for schema in kept:
            why = reader.attach(connection, schema) if files is not None else None
            if why is None:
                searched.append(schema)
            else:
                context.notes.append(
                    f"schema {shown_name(schema, '(a name not repeated)')}: not searched "
                    f"({why}); choose schemas with --schema"
                )
        sqlite = files is not None
        relations = {} if sqlite else _pg_relations(conn, searched)
        kinds = ObjectKind.TABLE if sqlite else ObjectKind.TABLE | ObjectKind.MATERIALIZED_VIEW
        tables = []
        uncatalogable: list[str] = []
        unprintable = 0
        partitions = 0
        for schema in searched:
            found = inspector.get_multi_columns(schema=schema, kind=kinds)
            for (_, table), columns in sorted(found.items(), key=lambda kv: kv[0][1]):
                relkind, partition, estimate = relations.get((schema, table), ("r", False, -1.0))
                if partition:
                    partitions += 1
                    continue
                if not _catalogable(schema, table, sqlite):
                    uncatalogable.append(f"{schema}.{table}")
                    continue
                plain = sqlite and schema == "main"
                name = table.lower() if plain else f"{schema}.{table}".lower()
                bare = table.lower() if schema == default and not plain else None
                # A name with a line break or control character could end a comment of the
                # proposed YAML or hide a line of the report: such columns are left out.
                printable = [c for c in columns if str(c["name"]).isprintable()]
                unprintable += len(columns) - len(printable)
                tables.append(
                    _Table(
                        schema,
                        table,
                        name,
                        bare,
                        [(c["name"], c["type"]) for c in printable],
                        kind="materialized_view" if relkind == "m" else "table",
                        sample_percent=_sample_percent(relkind, estimate, sample_rows),
                    )
                )
    except sa.exc.SQLAlchemyError as exc:
        raise WarehouseError(
            f"connection {connection!r}: cannot list its tables ({describe_failure(exc)}); "
            "the connection's user needs to read the schema (information_schema)"
        ) from None
    finally:
        _end_transaction(conn)
    if partitions:
        context.notes.append(
            f"{partitions} partition(s) not listed: each is read through its partitioned table"
        )
    if unprintable:
        context.notes.append(
            f"{unprintable} column(s) not searched: their names hold a line break or a control "
            "character, which a catalog entry (or this report) cannot show safely; rename them"
        )
    if uncatalogable:
        shown = [shown_name(n, "") for n in uncatalogable[:10]]
        context.notes.append(
            f"{len(uncatalogable)} table(s) not searched, since the catalog cannot name them "
            "as they are (it lower-cases dataset names, and `.` separates the schema): "
            f"{', '.join(s for s in shown if s) or '(names not repeated)'}"
            f"{' ...' if len(uncatalogable) > 10 else ''}; give each a lower-case name (or a "
            "view named so) to catalogue it"
        )
    return searched, tables


def _catalogable(schema: str, table: str, sqlite: bool) -> bool:
    """Whether a dataset name can name the table: the catalog lower-cases names (SQLite's are
    case-insensitive, Postgres' are not) and reads the part after the last `.` as the table."""
    if "." in table or any(ord(c) < 32 for c in table):
        return False
    return sqlite or (schema == schema.lower() and table == table.lower())


def _schema_list(schemas: Sequence[str]) -> str:
    named = _shown_schemas(schemas)
    unnamed = len(schemas) - len(named)
    listed = ", ".join(named) or "(none)"
    return listed + (f" and {unnamed} not named here" if unnamed else "")


def _shown_schemas(schemas: Sequence[str]) -> list[str]:
    """Schema names a report may repeat (`shown_name`): a per-user schema named with an
    address or a number is counted, not named."""
    return [s for s in schemas if shown_name(s, "")]
