"""How a warehouse completes a table reference: `t` and `s.t` under a default database and schema.

Without defaults a table is named as written (`names.table_name`), the contract's default.
Given `--default-db` / `--default-schema`, every reference is completed the way its warehouse
resolves it, by the dialect's name depth:

- database.schema.table: Postgres, Snowflake, T-SQL, Redshift, DuckDB, Trino, BigQuery
  (project.dataset.table), Spark 3 and Databricks (catalog.schema.table), generic ANSI. `t`
  takes both defaults, `s.t` the database; `db..t` takes the default schema in T-SQL and the
  PUBLIC schema in Snowflake.
- database.table, where a schema is a database: MySQL, Hive, Spark 2, ClickHouse, SQLite,
  Teradata. `t` takes the database, which either flag may name.
- schema.table: Oracle, Exasol. `t` takes the schema; there is no database part.

Identifiers fold as the dialect folds them (Snowflake and Oracle upper-case unquoted names,
Postgres lower-cases them, quoted names keep their case): the folded parts are the table's
identity, which decides whether a reference names a CTE or the table a schema key names. What
lineage writes stays lower-cased. `USE` and `SET search_path` / `SET @@dataset_id` change the
defaults for the statements after them. A name that needs a default nobody gave is kept as
written, and is a gap. A date shard or wildcard table, completed, is then named by its family
where the known tables name it (`table_shards`).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, replace
from enum import Enum
from typing import NamedTuple

from sqlglot import exp
from sqlglot.dialects.clickhouse import ClickHouse
from sqlglot.dialects.dialect import Dialect
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.dialects.exasol import Exasol
from sqlglot.dialects.hive import Hive
from sqlglot.dialects.mysql import MySQL
from sqlglot.dialects.oracle import Oracle
from sqlglot.dialects.presto import Presto
from sqlglot.dialects.snowflake import Snowflake
from sqlglot.dialects.spark import Spark
from sqlglot.dialects.sqlite import SQLite
from sqlglot.dialects.teradata import Teradata
from sqlglot.dialects.tsql import TSQL
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from erasure.errors import LineageError
from erasure.lineage.sql.gaps import SqlGap
from erasure.lineage.sql.names import table_key, table_name
from erasure.lineage.sql.table_shards import resolve_shard
from erasure.model import GapKind

_CURRENT_SCHEMA = re.compile(
    r"^ALTER SESSION SET CURRENT_SCHEMA\s*=\s*(?P<name>\S+)$", re.IGNORECASE
)

_SEARCH_PATH = re.compile(r"^SET search_path\b", re.IGNORECASE)


class Depth(Enum):
    """The parts a dialect's fully qualified table name has."""

    DATABASE_SCHEMA_TABLE = "database.schema.table"
    DATABASE_TABLE = "database.table"
    SCHEMA_TABLE = "schema.table"


def name_depth(dialect: Dialect) -> Depth:
    """How many parts a fully qualified table name has in `dialect`."""
    if isinstance(dialect, Spark):  # before Hive: Spark 3 added catalogs to Hive's names
        return Depth.DATABASE_SCHEMA_TABLE
    if isinstance(dialect, (MySQL, Hive, ClickHouse, SQLite, Teradata)):
        return Depth.DATABASE_TABLE
    if isinstance(dialect, (Oracle, Exasol)):
        return Depth.SCHEMA_TABLE
    return Depth.DATABASE_SCHEMA_TABLE


class TableName(NamedTuple):
    """A table reference resolved: what lineage writes, and the warehouse's own parts."""

    text: str  # lower-cased, completed where defaults allow: the name edges carry
    # The parts as the warehouse stores them (folded, quoted kept); None for a shard family,
    # which is lineage's name for many tables, matched by its name alone.
    identity: tuple[str, ...] | None
    missing: str | None = None  # the default the reference needed and nobody gave
    also_read: tuple[str, ...] = ()  # other tables a wildcard table reads

    def gaps(self, written: str, number: int) -> list[SqlGap]:
        """What this name leaves unknown in statement `number`, for the reference `written`."""
        found = []
        if self.missing is not None:
            found.append(
                SqlGap(
                    f"{written} in statement {number} names no schema and no {self.missing} "
                    "or USE gives one: kept as written",
                    GapKind.UNRESOLVED_COLUMN,
                )
            )
        if self.also_read:
            found.append(
                SqlGap(
                    f"wildcard table {written} in statement {number} also reads "
                    f"{', '.join(self.also_read)}: their columns are not traced",
                    GapKind.UNRESOLVED_COLUMN,
                )
            )
        return found


@dataclass(frozen=True)
class TableNaming:
    """Names table references: as written, or completed with the current database and schema."""

    dialect: Dialect
    database: exp.Identifier | None = None
    schema: exp.Identifier | None = None
    completes: bool = False  # any default given: names are completed, not kept as written

    @classmethod
    def of(
        cls, dialect: Dialect, default_db: str | None = None, default_schema: str | None = None
    ) -> TableNaming:
        """The naming `--default-db` / `--default-schema` ask for; none given: as written."""
        if default_db is None and default_schema is None:
            return cls(dialect)
        database = _identifier(default_db, "--default-db", dialect)
        schema = _identifier(default_schema, "--default-schema", dialect)
        depth = name_depth(dialect)
        dialect_name = type(dialect).__name__.lower()
        if depth is Depth.SCHEMA_TABLE and database is not None:
            raise LineageError(
                f"{dialect_name} names tables schema.table, without a database: "
                "give --default-schema instead of --default-db"
            )
        if depth is Depth.DATABASE_TABLE:
            if database is not None and schema is not None and not _same(database, schema, dialect):
                raise LineageError(
                    f"{dialect_name} names tables database.table, where a schema is a "
                    f"database: --default-db {default_db} and --default-schema {default_schema} "
                    "name two; give one of them"
                )
            database, schema = database or schema, None
        return cls(dialect, database, schema, completes=True)

    @property
    def depth(self) -> Depth:
        return name_depth(self.dialect)

    def reference(self, table: exp.Table) -> TableName:
        """The name of a table a statement reads or writes."""
        if not self.completes:
            text = table_name(table)
            return TableName(text, tuple(text.split(".")))
        parts = _parts(table)
        if parts is None or _is_temporary(table):
            return self._named(table, None)
        completed, missing = self._complete(parts)
        if completed is None:
            return self._named(table, missing)
        return self._named(_table(completed), None)

    def resolve(self, table: exp.Table, known: Collection[str]) -> TableName:
        """`reference`, and a date shard or wildcard named by its family where `known` has it."""
        name = self.reference(table)
        shard = resolve_shard(name.text, known)
        if shard.name == name.text:
            return name._replace(also_read=shard.also_read)
        return TableName(shard.name, None, name.missing, shard.also_read)

    def key(self, text: str) -> TableName:
        """The name of a table given as text: a schema.json key, a declared target."""
        if not self.completes:
            written = table_key(text, self.dialect)
            return TableName(written, tuple(written.split(".")))
        try:
            return self.reference(exp.to_table(text, dialect=self.dialect))
        except SqlglotError:
            written = text.strip().lower()
            return TableName(written, (written,))

    def same_identifier(self, left: exp.Identifier, right: exp.Identifier) -> bool:
        """Whether two names are one to the warehouse: a table reference and a CTE name."""
        if not self.completes:
            return left.name.lower() == right.name.lower()
        return _same(left, right, self.dialect)

    def after(self, statement: exp.Expr | None) -> tuple[TableNaming, SqlGap | None]:
        """The naming for the statements after `statement`, which may `USE` another schema.

        The second value is a gap: a change of database or schema that could not be read.
        """
        if not self.completes or statement is None:
            return self, None
        if isinstance(statement, exp.Use):
            return self._use(statement)
        if isinstance(statement, exp.Set):
            return self._set(statement)
        if isinstance(statement, exp.Command):
            return self._command(statement)
        return self, None

    # - completion

    def _complete(
        self, parts: list[exp.Identifier | None]
    ) -> tuple[list[exp.Identifier] | None, str | None]:
        """The parts completed with the defaults; None: kept as written, for want of the
        default named second (or of any meaning)."""
        depth = self.depth
        if depth is Depth.DATABASE_SCHEMA_TABLE:
            if len(parts) == 3 and parts[1] is None:  # db..t
                schema = (
                    exp.to_identifier("PUBLIC")
                    if isinstance(self.dialect, Snowflake)
                    else self.schema
                )
                if schema is None:
                    return None, "--default-schema"
                return [_some(parts[0]), schema, _some(parts[2])], None
            if len(parts) >= 3:
                return [_some(p) for p in parts], None
            if len(parts) == 2:
                prefix = [self.database] if self.database is not None else []
                return [*prefix, _some(parts[0]), _some(parts[1])], None
            if self.schema is None:
                return None, "--default-schema"
            prefix = [self.database] if self.database is not None else []
            return [*prefix, self.schema, _some(parts[0])], None
        default = self.database if depth is Depth.DATABASE_TABLE else self.schema
        if len(parts) == 1 and default is not None:
            return [default, _some(parts[0])], None
        if any(part is None for part in parts):  # `db..t` has no meaning here
            return None, None
        return [_some(p) for p in parts], None

    def _named(self, table: exp.Table, missing: str | None) -> TableName:
        folded = normalize_identifiers(table.copy(), dialect=self.dialect)
        identity = tuple(part.name for part in folded.parts)
        return TableName(table_name(table), identity, missing)

    # - USE and SET

    def _command(self, command: exp.Command) -> tuple[TableNaming, SqlGap | None]:
        """What sqlglot keeps as text: Oracle's ALTER SESSION, a search_path of several schemas."""
        text = " ".join(command.sql(dialect=self.dialect).split())
        current = _CURRENT_SCHEMA.match(text)
        if current is not None:
            schema = _one_name(current["name"], self.dialect)
            if schema is None:
                return self, SqlGap(
                    f"sets CURRENT_SCHEMA to {current['name']}, not understood",
                    GapKind.UNRESOLVED_COLUMN,
                )
            return replace(self, schema=schema), None
        if _SEARCH_PATH.match(text):
            return self, SqlGap(
                "sets search_path to several schemas: an unqualified name resolves to the "
                "first of them that has it, which lineage cannot see; names stay completed "
                f"with schema {_shown(self.schema)}",
                GapKind.UNRESOLVED_COLUMN,
            )
        return self, None

    def _use(self, use: exp.Use) -> tuple[TableNaming, SqlGap | None]:
        kind = use.args.get("kind")
        word = kind.name.upper() if isinstance(kind, exp.Expr) else ""
        if word in ("WAREHOUSE", "ROLE", "SECONDARY ROLES"):
            return self, None  # compute and privileges, not names
        target = use.this
        names = _parts(target) if isinstance(target, exp.Table) else None
        parts = [n for n in names or [] if n is not None]
        level = self._use_level(word, len(parts)) if names and len(parts) == len(names) else None
        if level is None:
            return self, SqlGap(
                f"{use.sql(dialect=self.dialect)} is not understood: names after it stay "
                f"completed with database {_shown(self.database)} and schema "
                f"{_shown(self.schema)}",
                GapKind.UNRESOLVED_COLUMN,
            )
        if len(parts) == 2:
            return replace(self, database=parts[0], schema=parts[1]), None
        if level == "schema":
            return replace(self, schema=parts[0]), None
        if isinstance(self.dialect, Spark):  # USE CATALOG resets the schema
            return replace(self, database=parts[0], schema=exp.to_identifier("default")), None
        if isinstance(self.dialect, DuckDB):
            return replace(self, database=parts[0], schema=exp.to_identifier("main")), None
        if isinstance(self.dialect, Snowflake):
            return replace(self, database=parts[0], schema=None), SqlGap(
                f"USE DATABASE {parts[0].name.lower()} leaves the current schema to the "
                "warehouse: names it would complete are kept as written until a USE SCHEMA",
                GapKind.UNRESOLVED_COLUMN,
            )
        return replace(self, database=parts[0]), None

    def _use_level(self, word: str, count: int) -> str | None:
        """Whether `USE [word] x` names a database or a schema (`x.y`: both); None: neither."""
        depth = self.depth
        if depth is not Depth.DATABASE_SCHEMA_TABLE:
            if count != 1:
                return None
            return "database" if depth is Depth.DATABASE_TABLE else "schema"
        if count == 2:
            return "schema" if word in ("", "SCHEMA", "NAMESPACE") else None
        if word == "CATALOG" or (word == "DATABASE" and not isinstance(self.dialect, Spark)):
            return "database"
        if word in ("SCHEMA", "NAMESPACE", "DATABASE"):
            return "schema"
        if isinstance(self.dialect, (Snowflake, TSQL, DuckDB)):
            return "database"
        if isinstance(self.dialect, (Spark, Presto)):
            return "schema"
        return None

    def _set(self, statement: exp.Set) -> tuple[TableNaming, SqlGap | None]:
        """`SET search_path = s` (one schema), BigQuery's `SET @@dataset_id = 'ds'`."""
        naming = self
        for item in statement.expressions:
            assignment = item.this if isinstance(item, exp.SetItem) else None
            if not isinstance(assignment, exp.EQ):
                continue
            name = _variable_name(assignment.this)
            if name not in ("search_path", "dataset_id", "dataset_project_id"):
                continue
            value = assignment.expression
            if not isinstance(value, (exp.Var, exp.Literal, exp.Column)) or (
                value.name.upper() == "DEFAULT"
            ):
                return naming, SqlGap(
                    f"SET {name} to {value.sql(dialect=self.dialect)} is not understood: "
                    f"names after it stay completed with schema {_shown(naming.schema)}",
                    GapKind.UNRESOLVED_COLUMN,
                )
            identifier = exp.to_identifier(value.name, quoted=isinstance(value, exp.Literal))
            if name == "dataset_project_id":
                naming = replace(naming, database=identifier)
            else:
                naming = replace(naming, schema=identifier)
        return naming, None


def _variable_name(variable: exp.Expr) -> str:
    while isinstance(variable, exp.Parameter) and isinstance(variable.this, exp.Expr):
        variable = variable.this
    return variable.name.lower() if isinstance(variable, exp.Expr) else ""


def _identifier(text: str | None, flag: str, dialect: Dialect) -> exp.Identifier | None:
    if text is None:
        return None
    identifier = _one_name(text, dialect)
    if identifier is None:
        raise LineageError(
            f"{flag} {text!r} is not one name: give the database and the schema with "
            "--default-db and --default-schema, quoting a name that holds dots or spaces"
        )
    return identifier


def _one_name(text: str, dialect: Dialect) -> exp.Identifier | None:
    """`crm`, `"Sales.EU"`, `acme-data`; None for `db.schema`, `a b` or nothing.

    Quoted in the dialect's identifier quotes, a name keeps its case and may hold anything;
    unquoted, it folds as the dialect folds names.
    """
    text = text.strip()
    quotes = [
        (quote, quote) if isinstance(quote, str) else (quote[0], quote[1])
        for quote in dialect.tokenizer_class.IDENTIFIERS
    ]
    for opening, closing in quotes:
        if len(text) > 2 and text.startswith(opening) and text.endswith(closing):
            inner = text[len(opening) : -len(closing)].replace(closing * 2, closing)
            return exp.to_identifier(inner, quoted=True)
    marks = {mark for pair in quotes for mark in pair}
    if not text or any(c == "." or c.isspace() or c in marks for c in text):
        return None
    return exp.to_identifier(text, quoted=False)


def _parts(table: exp.Table) -> list[exp.Identifier | None] | None:
    """catalog, db and name as identifiers (None for `db..t`'s empty schema); None: not a name."""
    if not isinstance(table.this, exp.Identifier):
        return None
    parts: list[exp.Identifier | None] = []
    for key in ("catalog", "db"):
        value = table.args.get(key)
        if isinstance(value, exp.Identifier):
            parts.append(value)
        elif value == "" and key == "db" and parts:
            parts.append(None)
        elif value:
            return None  # deeper names (`server.db.s.t`) stay as written
    return [*parts, table.this]


def _some(identifier: exp.Identifier | None) -> exp.Identifier:
    assert identifier is not None
    return identifier


def _table(parts: list[exp.Identifier]) -> exp.Table:
    name, *qualifiers = reversed(parts)
    return exp.Table(
        this=name.copy(),
        db=qualifiers[0].copy() if qualifiers else None,
        catalog=qualifiers[1].copy() if len(qualifiers) > 1 else None,
    )


def _is_temporary(table: exp.Table) -> bool:
    """T-SQL's `#t` and `##t` live in tempdb, whatever the current database."""
    name = table.this
    return isinstance(name, exp.Identifier) and bool(
        name.args.get("temporary") or name.args.get("global_")
    )


def _same(left: exp.Identifier, right: exp.Identifier, dialect: Dialect) -> bool:
    folded = [dialect.normalize_identifier(name.copy()).name for name in (left, right)]
    return folded[0] == folded[1]


def _shown(identifier: exp.Identifier | None) -> str:
    return identifier.name.lower() if identifier is not None else "(none)"
