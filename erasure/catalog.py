"""The catalog file (DESIGN section 2) as validated models.

A bad catalog fails with one message naming the file, the dataset and the field, and what is
allowed there. Paths inside the catalog (lineage files, SQLite URLs) are relative to the file.

Connections and rebuild targets are pluggable kinds (erasure.kinds): each entry names its
`kind`, or is written in a form that implies one (`{url: ...}`, `{sql: ...}`). The built-in
kinds' configs are declared here and their factories named by dotted path, so reading a
catalog imports none of the code that acts on it (erasure.warehouse, erasure.actions.rebuild);
a package adds more under the entry point groups `erasure.connections` and
`erasure.rebuild_targets`.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import json
import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from erasure.dbt_manifest import (
    MATERIALISED,
    checksum,
    depends_on,
    materialization,
    parse_manifest,
    relation,
)
from erasure.errors import CatalogError, ErasureError, LineageError, invalid_fields
from erasure.kinds import KindConfig, KindRegistry
from erasure.lakehouse.config import LakehouseConfig
from erasure.model import DAG_ID, DatasetRef

if TYPE_CHECKING:
    import sqlalchemy as sa


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetKind(StrEnum):
    TABLE = "table"
    VIEW = "view"
    MATERIALIZED_VIEW = "materialized_view"
    FILE = "file"
    TOPIC = "topic"
    FEATURE_STORE = "feature_store"
    EMBEDDING_INDEX = "embedding_index"
    MODEL = "model"
    CACHE = "cache"
    BACKUP = "backup"
    REPORT = "report"


# A view is computed on read: it holds no copy, so a loop through views alone never settles.
UNMATERIALISED_KINDS = frozenset({DatasetKind.VIEW})


class IdentifierSpec(_Strict):
    normalise: Literal["email", "strip", "e164", "lower"]
    default_region: str | None = None  # for e164: region of numbers written without +
    # A key naming one person (a customer id): the subject has one value of it, and a value
    # of it names the same person wherever it is held (locate, rule 2b).
    one_per_person: bool = False


class StoredForm(_Strict):
    """How one column stores an identifier when it differs from the identifier type's form:
    `CUST-C0001` (prefix), `c0001` (case), `1` for `C0001` (drop_prefix and integer)."""

    normaliser: Literal["email", "strip", "e164", "lower"] | None = None  # default: the type's
    prefix: str | None = Field(default=None, min_length=1)  # written before the identifier
    drop_prefix: str | None = Field(default=None, min_length=1)  # of the identifier, left out
    case: Literal["as_is", "upper", "lower"] = "as_is"  # the column changed the case
    integer: bool = False  # what remains is kept as a number (leading zeros lost)

    @model_validator(mode="after")
    def _coherent(self) -> StoredForm:
        if self.normaliser in ("email", "e164") and (
            self.integer or self.case != "as_is" or self.drop_prefix
        ):
            raise ValueError(
                f"a column read with the {self.normaliser} normaliser cannot also declare "
                "integer, case or drop_prefix; declare those for strip or lower identifiers"
            )
        return self


class ConnectionConfig(KindConfig):
    """A catalog connection: how to reach one warehouse. Kinds: erasure.warehouse."""


@dataclass(frozen=True)
class ConnectionContext:
    """What a connection factory may use besides its config."""

    name: str  # the catalog's name for the connection, for messages
    base_dir: Path  # the catalog file's directory: relative paths are relative to it
    # (connection name, airflow_conn_id) -> URL: what the Airflow adapters pass in.
    resolve_conn_id: Callable[[str, str], sa.URL | str] | None = None


# Factories return the SQLAlchemy URL (it may hold a password: never log it).
CONNECTIONS: KindRegistry[ConnectionConfig, ConnectionContext, sa.URL | str] = KindRegistry(
    ConnectionConfig,
    family="connection",
    group="erasure.connections",
)


class UrlConnection(ConnectionConfig):
    """A SQLAlchemy URL; a relative SQLite path is relative to the catalog file."""

    kind: Literal["url"] = "url"
    url: str
    implied_by: ClassVar[str | None] = "url"


class AirflowConnection(ConnectionConfig):
    """An Airflow connection, resolved by the adapter's resolver (the Postgres provider's hook)."""

    kind: Literal["airflow"] = "airflow"
    airflow_conn_id: str
    implied_by: ClassVar[str | None] = "airflow_conn_id"


CONNECTIONS.register(UrlConnection, "erasure.warehouse:url_of")
CONNECTIONS.register(AirflowConnection, "erasure.warehouse:airflow_url")
ConnectionField = Annotated[SerializeAsAny[ConnectionConfig], BeforeValidator(CONNECTIONS.validate)]


class ReferenceSpec(_Strict):
    """A one-way pointer from this dataset's column to a row of another that may be shared."""

    column: str
    dataset: str
    key: str


class RebuildTarget(KindConfig):
    """How a derived artefact is re-materialised. Kinds: erasure.actions.rebuild."""

    def declared_sql(self) -> list[str] | None:
        """The SQL that rebuilds the artefact, which is also its declared lineage."""
        return None

    def producer(self) -> str | None:
        """The job that writes the artefact, named for lineage gaps (`DAG build_marts`)."""
        return None

    def plan_detail(self) -> dict[str, Any]:
        """What the plan records about the method, beside `method: <kind>`."""
        return {}

    def rebuilds(self, dataset_kind: DatasetKind) -> bool:
        """Whether this target can re-materialise a dataset of that kind."""
        return True

    # Whether one config can serve every dataset a catalog default matches: each dataset's
    # rebuild is then still its own and proven its own (a DAG's run of that dataset, its
    # producer, a view). SQL statements or a dbt selection name one dataset.
    serves_many: ClassVar[bool] = False


# Factories take an erasure.actions.rebuild.RebuildContext and return its RebuildEvidence;
# `rebuild()` there checks what a plug-in's factory returned.
REBUILD_TARGETS: KindRegistry[RebuildTarget, Any, Any] = KindRegistry(
    RebuildTarget,
    family="rebuild target",
    group="erasure.rebuild_targets",
)


class SqlRebuild(RebuildTarget):
    """`{sql: ...}`: one statement or a list, run in one transaction on the connection."""

    kind: Literal["sql"] = "sql"
    sql: list[str]
    implied_by: ClassVar[str | None] = "sql"

    @field_validator("sql", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def declared_sql(self) -> list[str]:
        return self.sql

    def plan_detail(self) -> dict[str, Any]:
        return {"statements": len(self.sql)}


class DagRebuild(RebuildTarget):
    """`{dag_id: ...}`: the Airflow DAG that re-materialises the artefact."""

    kind: Literal["dag"] = "dag"
    dag_id: str
    implied_by: ClassVar[str | None] = "dag_id"
    serves_many: ClassVar[bool] = True  # each dataset proven by the run's own COMPLETE of it

    def producer(self) -> str:
        return f"DAG {self.dag_id}"

    def plan_detail(self) -> dict[str, Any]:
        return {"dag_id": self.dag_id}


class DbtRebuild(RebuildTarget):
    """`{select: ...}`: `dbt run --select <select>` in a dbt project (the dbt CLI); a model
    described by a catalog's dbt manifest gets one with no catalog entry. The run must run
    one model, the one that writes this dataset (its relation, and the materialisation the
    plan assumed, read from the run's own manifest), and report it a success. Paths (the
    project, profiles, an executable given as a path) are catalog-relative."""

    kind: Literal["dbt"] = "dbt"
    select: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:/+@-]+$")  # one model
    project_dir: str
    profiles_dir: str | None = None  # default: dbt's (the project's folder, ~/.dbt)
    target: str | None = None  # the profile's target; default: the profile's own
    executable: str = "dbt"  # a dbt installed beside Airflow, or in a virtualenv of its own
    full_refresh: bool = False  # an incremental model rebuilt from scratch
    node: str | None = None  # the manifest's unique_id of the model
    materialized: str | None = None  # the materialisation the plan assumed
    checksum: str | None = None  # of the model's code as the plan read it
    depends_on: list[str] | None = None  # the nodes it reads, as the plan read them
    environment: list[str] = Field(default_factory=list)  # variables dbt is given (profiles)

    @field_validator("environment")
    @classmethod
    def _not_withheld(cls, names: list[str]) -> list[str]:
        return _passable(names)

    timeout_seconds: int = Field(default=3600, ge=1)
    implied_by: ClassVar[str | None] = "select"

    def producer(self) -> str:
        return f"dbt {self.node or self.select}"

    def plan_detail(self) -> dict[str, Any]:
        detail: dict[str, Any] = {"select": self.select}
        if self.full_refresh:
            detail["full_refresh"] = True
        return detail


class ProducerRebuild(RebuildTarget):
    """`{kind: producer, dags: [...]}`: the Airflow DAG whose task last wrote the artefact, as
    its OpenLineage events tell, re-runs it; the plan names the DAG. `dags` are the DAG id
    patterns the erasure may trigger: a producer that is no Airflow task, or a DAG none of
    them matches, escalates naming it. Meant for `defaults`, so that what Airflow builds needs
    no entry of its own."""

    kind: Literal["producer"] = "producer"
    dags: list[str] = Field(min_length=1)
    implied_by: ClassVar[str | None] = "dags"
    serves_many: ClassVar[bool] = True

    def allows(self, dag_id: str) -> bool:
        """A DAG id (Airflow's own rule for one) that one of `dags` matches."""
        return DAG_ID.fullmatch(dag_id) is not None and any(
            fnmatch.fnmatchcase(dag_id, pattern) for pattern in self.dags
        )


class ViewRebuild(RebuildTarget):
    """A view: computed on read from its cleaned upstreams, nothing to run."""

    kind: Literal["view"] = "view"
    serves_many: ClassVar[bool] = True

    def rebuilds(self, dataset_kind: DatasetKind) -> bool:
        return dataset_kind is DatasetKind.VIEW


REBUILD_TARGETS.register(SqlRebuild, "erasure.actions.rebuild:rebuild_by_sql")
REBUILD_TARGETS.register(DagRebuild, "erasure.actions.rebuild:rebuild_by_dag")
REBUILD_TARGETS.register(ViewRebuild, "erasure.actions.rebuild:rebuild_view")
REBUILD_TARGETS.register(DbtRebuild, "erasure.actions.dbt_run:rebuild_by_dbt")
REBUILD_TARGETS.register(ProducerRebuild, "erasure.actions.rebuild:rebuild_by_producer")
RebuildField = Annotated[SerializeAsAny[RebuildTarget], BeforeValidator(REBUILD_TARGETS.validate)]


class AggregateSpec(_Strict):
    quasi_identifiers: list[str] = Field(min_length=1)
    count_column: str | None = None  # absent: k cannot be measured, the aggregate escalates
    k_threshold: int | None = Field(default=None, ge=2)


class ProducerSpec(_Strict):
    """Who writes the dataset; an opaque producer (UDF, external call) hides column lineage."""

    name: str
    opaque: bool = False


class DatasetAlias(_Strict):
    namespace: str
    name: str


class LakehouseTableSpec(_Strict):
    """Where a lakehouse table lives: a lakehouse of the catalog's `lakehouses`, and the table
    in it (Iceberg: `namespace.table` of its catalog; Delta: the folder under its root)."""

    catalog: str = Field(min_length=1)
    table: str = Field(min_length=1)


class DatasetSpec(_Strict):
    namespace: str
    name: str
    connection: str | None = None
    # An Iceberg or Delta table: erased with its history (erasure.actions.erase_lakehouse).
    lakehouse: LakehouseTableSpec | None = None
    kind: DatasetKind
    storage: Literal["mutable", "immutable"] = "mutable"
    holds_subject: dict[str, list[str]] = Field(default_factory=dict)
    # column -> how it stores its identifier, where that differs from the identifier type
    stored_forms: dict[str, StoredForm] = Field(default_factory=dict)
    references: list[ReferenceSpec] = Field(default_factory=list)
    pii_columns: list[str] = Field(default_factory=list)
    columns: list[str] | None = None  # schema for SQL lineage; else read from the warehouse
    rebuild: RebuildField | None = None
    aggregate: AggregateSpec | None = None
    encryption: Literal["none", "per_subject"] = "none"
    retention_days: int | None = Field(default=None, ge=0)
    producer: ProducerSpec | None = None
    aliases: list[DatasetAlias] = Field(default_factory=list)  # explicit, never guessed
    owner: str | None = None
    description: str | None = None

    @field_validator("name")
    @classmethod
    def _lower(cls, value: str) -> str:
        return _dataset_name(value).lower()

    @field_validator("rebuild")
    @classmethod
    def _rebuilds_this_kind(
        cls, value: RebuildTarget | None, info: ValidationInfo
    ) -> RebuildTarget | None:
        kind = info.data.get("kind")
        if value is not None and kind is not None and not value.rebuilds(kind):
            raise ValueError(f"a {value.kind} rebuild target cannot rebuild a {kind.value}")
        return value

    @field_validator("holds_subject", mode="before")
    @classmethod
    def _columns_as_lists(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: [v] if isinstance(v, str) else v for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _stored_forms_name_subject_columns(self) -> DatasetSpec:
        held = {c for columns in self.holds_subject.values() for c in columns}
        for column in self.stored_forms:
            if column not in held:
                raise ValueError(
                    f"stored_forms names column {column!r}, which holds_subject does not list; "
                    f"declare it under holds_subject or remove it (subject columns: "
                    f"{sorted(held)})"
                )
        return self

    @property
    def ref(self) -> DatasetRef:
        return DatasetRef(self.namespace, self.name)

    @property
    def materialised(self) -> bool:
        return self.kind not in UNMATERIALISED_KINDS

    @property
    def reachable(self) -> bool:
        """Whether this system can read and erase the dataset itself: through a warehouse
        connection, or as a lakehouse table."""
        return self.connection is not None or self.lakehouse is not None


class DefaultMatch(_Strict):
    """Which datasets a default describes: shell-style patterns (`*`, `?`, `[...]`) over the
    namespace (as written) and the name (in lower case); `*` crosses `.` and `/`."""

    namespace: str = Field(default="*", min_length=1)
    name: str = Field(default="*", min_length=1)

    @field_validator("name")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.lower()

    def matches(self, ref: DatasetRef) -> bool:
        return fnmatch.fnmatchcase(ref.namespace, self.namespace) and fnmatch.fnmatchcase(
            ref.name, self.name
        )


class DatasetDefault(_Strict):
    """A policy for every dataset the lineage reaches that has no entry of its own and whose
    identity `match` matches: what an entry would say of its kind, storage and rebuild. It
    never says who a dataset holds (holds_subject, references): those are found and written
    per dataset."""

    match: DefaultMatch
    kind: DatasetKind
    storage: Literal["mutable", "immutable"] = "mutable"
    connection: str | None = None
    rebuild: RebuildField | None = None
    encryption: Literal["none", "per_subject"] = "none"
    retention_days: int | None = Field(default=None, ge=0)
    producer: ProducerSpec | None = None
    owner: str | None = None
    description: str | None = None

    @model_validator(mode="after")
    def _describes_a_dataset(self) -> DatasetDefault:
        self.example()  # an entry's own checks (a rebuild target for its kind)
        if self.rebuild is not None and not self.rebuild.serves_many:
            raise ValueError(
                f"a {self.rebuild.kind} rebuild names one dataset's statements or model, and a "
                "default describes many: use dag_id (each dataset proven by the DAG's own run "
                "of it), {kind: producer, dags: [...]}, or none, and give a dataset that needs "
                f"{self.rebuild.kind} an entry of its own"
            )
        if self.kind is DatasetKind.VIEW and self.connection is None:
            raise ValueError(
                "a default of kind view needs a connection: each view it describes is checked "
                "to be one in the warehouse before the erasure relies on it holding no rows"
            )
        return self

    def example(self) -> DatasetSpec:
        """The entry this default gives a dataset it matches."""
        return self.spec_for(DatasetRef(self.match.namespace, "default"))

    def spec_for(self, ref: DatasetRef) -> DatasetSpec:
        """The entry this default gives `ref`."""
        fields = {name: getattr(self, name) for name in type(self).model_fields if name != "match"}
        return DatasetSpec(namespace=ref.namespace, name=ref.name, **fields)

    def shown(self, index: int) -> str:
        return (
            f"catalog default #{index + 1} (namespace {_shown_pattern(self.match.namespace)}, "
            f"name {_shown_pattern(self.match.name)})"
        )


@dataclass(frozen=True)
class DescribedBy:
    """Where a dataset with no catalog entry of its own got one: a default or a dbt manifest."""

    source: str  # "catalog default #2 (...)", "dbt manifest ...: model.shop.customers (table)"
    note: str | None = None  # why it is not rebuilt, when it is not
    digest: str | None = None  # of the entry it gives: the act step must be given the same


class SqlLineageSource(_Strict):
    path: str
    dialect: str | None = None


class DbtLineageSource(_Strict):
    """A dbt `manifest.json` (glob, catalog-relative): models and sources, declared lineage."""

    manifest: str
    namespace: str | None = None  # of its datasets; default: the catalog entry's of that name
    dialect: str | None = None  # for the compiled SQL; default: the manifest's adapter type
    # Its models, snapshots and seeds are datasets with no catalog entry (an entry of the same
    # name wins), kind from the materialisation, rebuilt by dbt: with `connection` only (the
    # warehouse its models are in, where each is checked and counted).
    describe: bool = True
    connection: str | None = None
    project_dir: str | None = None  # default: the folder above the manifest's (target/..)
    profiles_dir: str | None = None
    target: str | None = None
    executable: str = "dbt"
    dag_id: str | None = None  # rebuild by triggering this DAG (Cosmos) instead of the CLI
    incremental: Literal["escalate", "full_refresh"] = "escalate"
    # The namespace OpenLineage producers give this warehouse (`postgres://host:5432`, as
    # dbt-ol and Airflow's provider do): each described node is also known by it and
    # `database.schema.alias`, so their run events land on the catalog's datasets.
    openlineage_namespace: str | None = None
    environment: list[str] = Field(default_factory=list)  # variables dbt is given (profiles)

    @field_validator("environment")
    @classmethod
    def _not_withheld(cls, names: list[str]) -> list[str]:
        return _passable(names)


class LineageSources(_Strict):
    openlineage: list[str] = Field(default_factory=list)
    sql: list[SqlLineageSource] = Field(default_factory=list)
    dbt: list[DbtLineageSource] = Field(default_factory=list)


class Catalog(_Strict):
    version: Literal[1]
    k_threshold: int = Field(default=10, ge=2)
    sla_days: int = Field(default=30, ge=1, le=30)
    identifiers: dict[str, IdentifierSpec]
    connections: dict[str, ConnectionField] = Field(default_factory=dict)
    # Iceberg catalogs (SQL, REST, Glue, Hive) and Delta roots the lakehouse tables live in.
    lakehouses: dict[str, LakehouseConfig] = Field(default_factory=dict)
    datasets: list[DatasetSpec]
    # Policy for datasets with no entry (first match wins), after a dbt manifest's description.
    defaults: list[DatasetDefault] = Field(default_factory=list)
    lineage: LineageSources = Field(default_factory=LineageSources)
    base_dir: Path = Field(default=Path("."), exclude=True)

    @model_validator(mode="after")
    def _cross_references(self) -> Catalog:
        seen: set[tuple[str, str]] = set()
        by_bare_name: dict[str, set[str]] = {}
        labels: dict[str, tuple[str, str, int]] = {}
        for index, d in enumerate(self.datasets):
            if (d.namespace, d.name) in seen:
                raise ValueError(
                    f"dataset {shown_name(d.name)}: declared twice in namespace "
                    f"{shown_name(d.namespace)}"
                )
            seen.add((d.namespace, d.name))
            for namespace, name in [(d.namespace, d.name), *_alias_keys(d)]:
                by_bare_name.setdefault(name, set()).add(namespace)
                # The action log, the plan and the record name a dataset `namespace/name`:
                # two datasets named alike there, by an entry or an alias (`s3://lake` + `a/b`
                # and `s3://lake/a` + `b`, or the same name twice) would share one another's
                # erasures and rulings.
                other = labels.setdefault(f"{namespace}/{name}", (namespace, name, index))
                if other[2] == index:
                    continue
                first, second = _described(self.datasets[other[2]]), _described(d)
                if other[:2] == (namespace, name):
                    spelt = (
                        f"namespace {shown_name(namespace)} name {shown_name(name)} names both "
                        f"{first} and {second} (as an entry or an alias)"
                    )
                else:
                    spelt = (
                        f"namespace {shown_name(other[0])} name {shown_name(other[1])} ({first}) "
                        f"and namespace {shown_name(namespace)} name {shown_name(name)} "
                        f"({second}) are written 'namespace/name' alike"
                    )
                raise ValueError(
                    f"{spelt}: one name, one dataset; drop the alias or rename one, or the "
                    "erasure of one would count for the other"
                )
        for ds in self.datasets:
            self._check_entry(ds, f"dataset {shown_name(ds.name)}", by_bare_name)
        for index, default in enumerate(self.defaults):
            self._check_entry(default.example(), default.shown(index), {})
        for source in self.lineage.dbt:
            if source.connection is not None and source.connection not in self.connections:
                raise ValueError(
                    f"lineage.dbt {shown_name(source.manifest)} field 'connection': "
                    f"{shown_name(source.connection)} is not declared; allowed: "
                    f"{sorted(self.connections)}"
                )
        return self

    def _check_entry(
        self, ds: DatasetSpec, where: str, by_bare_name: Mapping[str, Collection[str]]
    ) -> None:
        """An entry's fields against the rest of the catalog (a default's, as the entry it
        gives)."""
        if ds.connection is not None and ds.connection not in self.connections:
            raise ValueError(
                f"{where} field 'connection': {shown_name(ds.connection)} is not declared; "
                f"allowed: {sorted(self.connections)}"
            )
        for id_type in ds.holds_subject:
            if id_type not in self.identifiers:
                raise ValueError(
                    f"{where} field 'holds_subject': identifier type "
                    f"{shown_name(id_type)} is not declared under 'identifiers'; allowed: "
                    f"{sorted(self.identifiers)}"
                )
        for id_type, columns in ds.holds_subject.items():
            for column in columns:
                form = ds.stored_forms.get(column)
                spec = self.identifiers.get(id_type)
                if form is None or spec is None or form.normaliser is not None:
                    continue
                if spec.normalise in ("email", "e164") and (
                    form.integer or form.case != "as_is" or form.drop_prefix
                ):
                    raise ValueError(
                        f"{where} field 'stored_forms.{column}': {id_type} values are read "
                        f"with the {spec.normalise} normaliser, which allows no integer, "
                        "case or drop_prefix; declare those for strip or lower identifiers"
                    )
        if ds.lakehouse is not None:
            _check_lakehouse_entry(ds, where, self.lakehouses)
        if ds.references and ds.connection is None:
            raise ValueError(
                f"{where} field 'connection': a dataset that references rows must name "
                "a connection to count them in"
            )
        if ds.holds_subject and not ds.reachable and ds.owner is None:
            raise ValueError(
                f"{where} field 'connection': a dataset that holds the subject must name "
                "a connection to erase them in (or a lakehouse table), or an 'owner' who "
                "erases them there (a system this one cannot reach, such as the CRM the "
                "warehouse copies)"
            )
        for ref in ds.references:
            matches = name_matches(ref.dataset, by_bare_name)
            if not matches:
                raise ValueError(
                    f"{where} field 'references': dataset {shown_name(ref.dataset)} is not "
                    "in the catalog"
                )
            if len(matches) > 1:
                raise ValueError(f"{where} field 'references': {_ambiguous(matches)}")
        if isinstance(ds.rebuild, DbtRebuild) and ds.connection is None:
            raise ValueError(
                f"{where} field 'connection': a dataset rebuilt by dbt must name the "
                "connection of the warehouse dbt writes it in: the run is checked to have "
                "written there, and the dataset is counted there"
            )
        if ds.encryption == "per_subject" and ds.storage != "immutable":
            raise ValueError(
                f"{where} field 'encryption': per_subject applies to immutable storage; "
                "set storage: immutable or drop encryption"
            )

    def lakehouse(self, ds: DatasetSpec) -> LakehouseConfig:
        """The lakehouse a lakehouse table of the catalog lives in."""
        if ds.lakehouse is None or ds.lakehouse.catalog not in self.lakehouses:
            raise CatalogError(
                f"dataset {shown_name(ds.name)} is no lakehouse table of this catalog"
            )
        return self.lakehouses[ds.lakehouse.catalog]

    def dataset(self, ref: DatasetRef) -> DatasetSpec | None:
        """The catalog entry for a dataset identity or one of its explicit aliases; else the
        one a dbt manifest (`lineage.dbt`) or a default (`defaults`) gives it (`description`
        says which)."""
        found = self.entry(ref)
        if found is not None:
            return found
        described = self._described(ref)
        return described[0] if described is not None else None

    def entry(self, ref: DatasetRef) -> DatasetSpec | None:
        """The catalog's own entry for `ref` (an identity or an explicit alias), if any."""
        return self._index().get((ref.namespace, ref.name))

    def description(self, ref: DatasetRef) -> DescribedBy | None:
        """Where `ref`'s entry came from when the catalog has none of its own."""
        if self.entry(ref) is not None:
            return None
        described = self._described(ref)
        return described[1] if described is not None else None

    def described_as(self, ref: DatasetRef) -> dict[str, str]:
        """What a plan records of where `ref`'s entry came from, and what the act and verify
        steps compare with it (a manifest or default changed since: re-plan); empty for an
        entry of the catalog's own."""
        described = self.description(ref)
        if described is None:
            return {}
        found = {"described_by": described.source}
        if described.digest is not None:
            found["described_digest"] = described.digest
        return found

    def described_as_planned(self, ref: DatasetRef, evidence: Mapping[str, Any]) -> bool:
        """Whether `ref` is described as it was for a plan item (`evidence`, its evidence): by
        its own entry then and now, or by the same default or manifest."""
        now = self.described_as(ref)
        return all(now.get(k) == evidence.get(k) for k in ("described_by", "described_digest"))

    def _described(self, ref: DatasetRef) -> tuple[DatasetSpec, DescribedBy] | None:
        cache: dict[DatasetRef, tuple[DatasetSpec, DescribedBy] | None] = self.__dict__.setdefault(
            "_described_cache", {}
        )
        if ref in cache:
            return cache[ref]
        found = self._dbt_described().get(ref)
        if found is None:
            for index, default in enumerate(self.defaults):
                if default.match.matches(ref):
                    try:
                        spec = default.spec_for(ref)
                        found = (spec, DescribedBy(default.shown(index), None, _digest(spec, None)))
                    except ValidationError:  # a name no entry could have: it stays unknown
                        found = None
                    break
        if len(cache) >= _DESCRIBED_CACHE:  # a long-lived process meets endless names
            cache.clear()
        cache[ref] = found
        return found

    def _dbt_described(self) -> Mapping[DatasetRef, tuple[DatasetSpec, DescribedBy]]:
        """The datasets the catalog's dbt manifests describe, read once."""
        cached = self.__dict__.get("_dbt_nodes")
        if cached is None:
            cached = _described_by_dbt(self)
            object.__setattr__(self, "_dbt_nodes", cached)
        return cached

    def require(self, ref: DatasetRef) -> DatasetSpec:
        """The entry for `ref`; CatalogError if the catalog does not know it."""
        ds = self.dataset(ref)
        if ds is None:
            raise CatalogError(
                f"dataset {ref.qualified!r} is not in the catalog: the plan was made with "
                "another catalog; re-plan"
            )
        return ds

    def target_of(self, reference: ReferenceSpec) -> DatasetSpec:
        """The dataset a reference points into."""
        return self.by_name(reference.dataset)

    def referrers(self, target: DatasetSpec) -> list[tuple[DatasetSpec, ReferenceSpec]]:
        """Every (dataset, reference) that points into `target`."""
        cached: dict[DatasetRef, list[tuple[DatasetSpec, ReferenceSpec]]] | None = (
            self.__dict__.get("_referrers_of")
        )
        if cached is None:  # resolved once: locate asks for every dataset it finds
            cached = {}
            for ds in self.datasets:
                for ref in ds.references:
                    cached.setdefault(self.target_of(ref).ref, []).append((ds, ref))
            object.__setattr__(self, "_referrers_of", cached)
        return list(cached.get(target.ref, []))

    def by_name(self, name: str) -> DatasetSpec:
        """The entry (or explicit alias) `name` spells: a bare name, unique across namespaces,
        or `namespace/name` (`name_matches`: slashes within a name are read as such)."""
        index = self._index()
        matches = name_matches(name, self._namespaces())
        found = list({index[match].ref: index[match] for match in matches}.values())
        if not found:
            # A malformed name is not echoed: it may be a subject's identifier typed there.
            raise CatalogError(
                f"dataset {shown_name(name, 'with that name')} is not in the catalog"
            )
        if len(found) > 1:
            raise CatalogError(_ambiguous(matches))
        return found[0]

    def _namespaces(self) -> dict[str, set[str]]:
        """The namespaces of each name the catalog knows (entries and explicit aliases)."""
        cached: dict[str, set[str]] | None = self.__dict__.get("_namespaces_of")
        if cached is None:
            cached = {}
            for namespace, name in self._index():
                cached.setdefault(name, set()).add(namespace)
            object.__setattr__(self, "_namespaces_of", cached)
        return cached

    def dbt_namespace(self, source: DbtLineageSource, name: str) -> str | None:
        """The namespace of a dbt node or source `name`: the dbt source's, else the catalog
        entry's of that name, else the one namespace every entry shares; None when none of
        these says (the catalog's order must not decide an identity)."""
        if source.namespace is not None:
            return source.namespace
        try:
            return self.by_name(name).namespace
        except ErasureError:
            namespaces = {ds.namespace for ds in self.datasets}
            return namespaces.pop() if len(namespaces) == 1 else None

    def canonical(self, ref: DatasetRef) -> DatasetRef:
        """The catalog identity for an alias; unknown datasets stay as they are."""
        ds = self.dataset(ref)
        return ds.ref if ds is not None else ref

    def k_for(self, ds: DatasetSpec) -> int:
        if ds.aggregate is not None and ds.aggregate.k_threshold is not None:
            return ds.aggregate.k_threshold
        return self.k_threshold

    def resolve(self, pattern: str) -> list[Path]:
        """Files matching a catalog-relative glob, sorted."""
        return sorted(Path(p) for p in glob.glob(str(self.base_dir / pattern)))

    def connection_url(self, name: str) -> sa.URL | str:
        """A SQLAlchemy URL for a catalog connection outside Airflow (sqlite paths are
        catalog-relative); CatalogError for one only Airflow can resolve."""
        return CONNECTIONS.build(self.connections[name], ConnectionContext(name, self.base_dir))

    def _index(self) -> dict[tuple[str, str], DatasetSpec]:
        cached: dict[tuple[str, str], DatasetSpec] | None = self.__dict__.get("_idx")
        if cached is None:
            cached = {}
            for ds in self.datasets:
                cached[(ds.namespace, ds.name)] = ds
                for key in _alias_keys(ds):
                    cached[key] = ds
            object.__setattr__(self, "_idx", cached)
        return cached


def _described(ds: DatasetSpec) -> str:
    return f"the dataset {shown_name(ds.name)} of namespace {shown_name(ds.namespace)}"


# Why a materialised node is not rebuilt by a dbt run: what the erasure needs instead.
_NOT_REBUILT = {
    "incremental": (
        "a dbt incremental model keeps the rows of its earlier runs (a run only adds or merges), "
        "so running it again does not remove the person, and a full refresh could drop history "
        "its sources no longer hold: catalog it with the columns that hold the subject "
        "(holds_subject) so its rows are erased, set `incremental: full_refresh` on the dbt "
        "source, or the DPO decides"
    ),
    "snapshot": (
        "a dbt snapshot keeps every earlier version of a row, and no run removes them: catalog "
        "it with the columns that hold the subject (holds_subject) so its rows are erased, or "
        "the DPO decides"
    ),
    "seed": (
        "a dbt seed is loaded from a CSV file in the dbt project, which a run loads again: "
        "erase the person from the file and catalog the table with the columns that hold the "
        "subject (holds_subject), or the DPO decides"
    ),
}
_KINDS = {
    "view": DatasetKind.VIEW,
    "table": DatasetKind.TABLE,
    "materialized_view": DatasetKind.MATERIALIZED_VIEW,
}


_DESCRIBED_CACHE = 100_000
# A dbt selector this system passes on: a file path of plain characters (no spaces or the
# selector grammar's operators, which would select more than the one model).
_SELECTABLE_PATH = re.compile(r"[A-Za-z0-9_./-]+")


def _described_by_dbt(catalog: Catalog) -> dict[DatasetRef, tuple[DatasetSpec, DescribedBy]]:
    """The datasets the catalog's dbt manifests describe (Catalog.dataset's second layer): each
    materialised node of a source with a connection, its kind from its materialisation,
    rebuilt by dbt where a run re-creates it from its cleaned upstreams. A manifest that
    cannot be read describes nothing here (the lineage build stops and says why); a node
    that cannot be read, or a dataset two nodes would be, is left undescribed (rule 1)."""
    described: list[tuple[list[DatasetRef], DatasetSpec, DescribedBy]] = []
    for source in catalog.lineage.dbt:
        if not source.describe or source.connection is None:
            continue
        for path in catalog.resolve(source.manifest):
            try:
                blob = path.read_bytes()
                nodes, _, _ = parse_manifest(path, blob)
            except (OSError, LineageError):
                continue
            project = _path(catalog, source.project_dir) or path.resolve().parent.parent
            where = os.path.relpath(path, catalog.base_dir)
            for uid, node in sorted(nodes.items()):
                try:
                    one = _described_node(catalog, source, project, uid, node)
                except (ValidationError, ValueError, TypeError, AttributeError):
                    continue  # a node no entry could be made of: it stays unknown
                if one is None:
                    continue
                spec, materialized, note = one
                shown = (
                    f"dbt manifest {_as_is(where, '(a manifest)')}: {_as_is(uid, '(a node)')} "
                    f"(materialized {_as_is(materialized, '(not repeated)')})"
                )
                # What the decision rests on, not the file: dbt rewrites the manifest (its
                # generated_at, its invocation) on every run, and a nightly run must not
                # fail every request planned before it.
                digest = _digest(spec, note)
                keys = [spec.ref, *(DatasetRef(a.namespace, a.name) for a in spec.aliases)]
                described.append((keys, spec, DescribedBy(shown, note, digest)))
    # A node is described under all its names or none: not when one of them is another
    # node's too (two databases, two manifests) or names an entry of the catalog's own (its
    # identity or alias), or two datasets would be one.
    claims: dict[DatasetRef, int] = {}
    for keys, _, _ in described:
        for key in keys:
            claims[key] = claims.get(key, 0) + 1
    own = catalog._index()
    return {
        key: (spec, by)
        for keys, spec, by in described
        if all(claims[k] == 1 and (k.namespace, k.name) not in own for k in keys)
        for key in keys
    }


def _described_node(
    catalog: Catalog, source: DbtLineageSource, project: Path, uid: str, node: dict[str, Any]
) -> tuple[DatasetSpec, str, str | None] | None:
    """One node's entry, its materialisation and why it is not rebuilt; None for a node that
    is no dataset (a test, an ephemeral model) or whose identity the catalog cannot tell."""
    if node.get("resource_type") not in MATERIALISED:
        return None
    materialized = materialization(node)
    name = relation(node)
    if materialized == "ephemeral" or name is None:
        return None
    namespace = catalog.dbt_namespace(source, name)
    if namespace is None:
        return None
    kind = _KINDS.get(materialized, DatasetKind.TABLE)
    note = _NOT_REBUILT.get(materialized)
    if materialized == "incremental" and source.incremental == "full_refresh":
        note = None
    elif materialized not in _KINDS and note is None:
        note = (
            f"its dbt materialization {shown_name(materialized, '(none given)')} is not one "
            "this system knows a run of to re-create from its upstreams: the DPO decides"
        )
    hooks = _writing_hooks(node)
    if note is None and hooks:
        note = (
            f"its dbt model runs {hooks} hook statement(s) besides its own SQL (a pre_hook or "
            "post_hook that is not a grant, comment or analyze), which may write rows a run "
            "does not re-create from its cleaned sources: the DPO decides"
        )
    database = str(node.get("database") or "").lower()
    rebuild: RebuildTarget | None = None
    if note is None and kind is not DatasetKind.VIEW:
        rebuild = _dbt_rebuild(catalog, source, project, uid, node, materialized)
        if rebuild is None:
            note = (
                "the manifest gives its dbt model no file path a selection can name alone "
                "(none, or one with characters dbt's selector grammar reads), so no run of "
                "it alone can be started: the DPO decides"
            )
    aliases = (
        [DatasetAlias(namespace=source.openlineage_namespace, name=f"{database}.{name}")]
        if source.openlineage_namespace is not None and database
        else []
    )
    spec = DatasetSpec(
        namespace=namespace,
        name=name,
        kind=kind,
        connection=source.connection,
        rebuild=rebuild,
        aliases=aliases,
        description=f"dbt {node.get('resource_type')} {uid}",
    )
    return spec, materialized, note


def _digest(spec: DatasetSpec, note: str | None) -> str:
    """Of what a decision rests on: the entry and why it is not rebuilt, less the paths of
    this machine (a deploy that moves the project, as git-sync does, changes nothing)."""
    entry = spec.model_dump(mode="json")
    if isinstance(entry.get("rebuild"), dict):
        for machine in ("project_dir", "profiles_dir", "executable"):
            entry["rebuild"].pop(machine, None)
    text = json.dumps([entry, note], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _dbt_rebuild(
    catalog: Catalog,
    source: DbtLineageSource,
    project: Path,
    uid: str,
    node: dict[str, Any],
    materialized: str,
) -> RebuildTarget | None:
    if source.dag_id is not None:
        return DagRebuild(dag_id=source.dag_id)
    path = node.get("original_file_path")
    if not isinstance(path, str) or not _SELECTABLE_PATH.fullmatch(path):
        return None
    profiles = _path(catalog, source.profiles_dir)
    return DbtRebuild(
        select=f"path:{path}",
        project_dir=str(project),
        profiles_dir=str(profiles) if profiles is not None else None,
        target=source.target,
        executable=source.executable,
        full_refresh=materialized == "incremental",
        node=uid,
        materialized=materialized,
        checksum=checksum(node),
        depends_on=sorted(depends_on(node)),
        environment=source.environment,
    )


# What a model's hook may do and still leave its table as its own SQL made it.
_HARMLESS_HOOK = re.compile(r"\s*(grant|revoke|comment|analyze|analyse)\b", re.IGNORECASE)


def _writing_hooks(node: dict[str, Any]) -> int:
    """How many of a model's pre_hook/post_hook statements may write rows."""
    config = node.get("config") or {}
    count = 0
    for key in ("pre-hook", "post-hook", "pre_hook", "post_hook"):
        hooks = config.get(key) or []
        for hook in hooks if isinstance(hooks, list) else [hooks]:
            sql = hook.get("sql") if isinstance(hook, dict) else hook
            if not isinstance(sql, str) or not _HARMLESS_HOOK.match(sql):
                count += 1
    return count


def _path(catalog: Catalog, value: str | None) -> Path | None:
    if value is None:
        return None
    return (catalog.base_dir / Path(value).expanduser()).resolve()


def _alias_keys(ds: DatasetSpec) -> list[tuple[str, str]]:
    return [(alias.namespace, alias.name.lower()) for alias in ds.aliases]


def name_matches(name: str, namespaces: Mapping[str, Collection[str]]) -> list[tuple[str, str]]:
    """Every (namespace, name) among `namespaces` (name -> its namespaces) that `name` spells:
    the whole of it as a bare name, in any namespace; `namespace/name`, split at any slash
    (dataset names hold slashes: an object store's `s3://bucket` + `path/to/file`); or a URI,
    whose path keeps its slash (`hdfs://nn:8020` + `/user/hive/warehouse/t`, and
    `file:///data/x.csv` for the `file` namespace's `/data/x.csv`)."""
    wanted = name.lower()
    splits = [(wanted[:at], wanted[at + 1 :]) for at, c in enumerate(wanted) if c == "/"]
    splits += [(wanted[:at], wanted[at:]) for at, c in enumerate(wanted) if c == "/" and at]
    if wanted.startswith("file:///"):
        splits.append(("file", wanted[len("file://") :]))
    found = dict.fromkeys((namespace, wanted) for namespace in sorted(namespaces.get(wanted, ())))
    found.update((split, None) for split in splits if split[0] in namespaces.get(split[1], ()))
    return list(found)


def _check_lakehouse_entry(
    ds: DatasetSpec, where: str, lakehouses: Mapping[str, LakehouseConfig]
) -> None:
    """A lakehouse table's entry: in a declared lakehouse, and only what its erasure does
    (rows deleted with their history; rebuilt by a DAG that overwrites it)."""
    assert ds.lakehouse is not None
    if ds.lakehouse.catalog not in lakehouses:
        raise ValueError(
            f"{where} field 'lakehouse.catalog': {shown_name(ds.lakehouse.catalog)} is not "
            f"declared under 'lakehouses'; allowed: {sorted(lakehouses)}"
        )
    refused = [
        (ds.connection is not None, "connection", "a lakehouse table is read through its "
         "lakehouse, not a warehouse connection: drop 'connection'"),
        (ds.storage != "mutable", "storage", "a lakehouse table is erased row by row with "
         "its history: catalog an immutable copy as a backup of its own"),
        (bool(ds.references), "references", "references are counted in a warehouse: "
         "declare the referencing dataset's identifier columns instead"),
        (ds.aggregate is not None, "aggregate", "an aggregate's groups are measured in a "
         "warehouse: catalog the lakehouse table as rebuilt, or let it escalate"),
        (not ds.materialised, "kind", "a view holds no rows to erase"),
        (ds.rebuild is not None and ds.rebuild.kind not in ("dag", "producer"), "rebuild",
         "a lakehouse table is rebuilt by the DAG that writes it (dag_id, or "
         "{kind: producer, dags: [...]}); its history is expired after the run"),
    ]
    for wrong, field, why in refused:
        if wrong:
            raise ValueError(f"{where} field {field!r}: {why}")


def _ambiguous(matches: Sequence[tuple[str, str]]) -> str:
    names = {bare for _, bare in matches}
    if len(names) == 1:
        return (
            f"dataset name {shown_name(next(iter(names)))} is in several namespaces "
            f"({', '.join(shown_name(namespace) for namespace, _ in matches)}): qualify it as "
            "'namespace/name'"
        )
    listed = "; ".join(
        f"namespace {shown_name(namespace)} name {shown_name(bare)}" for namespace, bare in matches
    )
    return f"the name spells several datasets ({listed}): name the one meant in full"


# Variables a dbt run is never given, whatever the catalog names: Vault's token, this system's
# and Airflow's settings, and dbt's own switches that change what a run writes.
_WITHHELD_FROM_DBT = re.compile(
    r"(VAULT_|BAO_|ERASURE_|AIRFLOW_|DBT_(TARGET|EMPTY|DEFER|STATE|FAVOR_STATE|FULL_REFRESH|"
    r"SELECT|EXCLUDE|PROFILES_DIR|PROJECT_DIR|TARGET_PATH))",
    re.IGNORECASE,
)


def _passable(names: list[str]) -> list[str]:
    withheld = [n for n in names if _WITHHELD_FROM_DBT.match(n)]
    if withheld:
        raise ValueError(
            f"{', '.join(repr(n) for n in withheld)} may not be given to dbt: Vault's token, "
            "this system's and Airflow's settings, and dbt's switches that change what a run "
            "writes (its target, --empty, --defer, its paths) are set by the catalog or not "
            "at all"
        )
    return names


DATASET_NAME_LENGTH = 512  # the erasure store's column for namespace/name keeps 512


def _dataset_name(value: str) -> str:
    """A catalogued dataset name: printable, not blank, no `.`/`..` path segment."""
    if not value.strip():
        raise ValueError("must not be blank")
    if len(value) > DATASET_NAME_LENGTH:
        raise ValueError(f"must be at most {DATASET_NAME_LENGTH} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("must not hold control characters (NUL, tab, line breaks)")
    if any(part in (".", "..") for part in re.split(r"[/\\]", value)):
        raise ValueError("must not hold a '.' or '..' path segment; give the real path")
    return value


# A dataset name an error may repeat: a plain table or path name, nothing that could be an
# identifier typed in the wrong place (no '@', '+', spaces or control characters).
_SHOWN_NAME = re.compile(r"[A-Za-z0-9_(][A-Za-z0-9_.$:/()-]{0,199}")


def shown_name(name: str, instead: str = "(a name that is not repeated)") -> str:
    """A name for a message: quoted when it is a plain name, else `instead` (it may be a
    value typed in the wrong place)."""
    return repr(name) if _plain_name(name) else instead


def _as_is(text: str, instead: str) -> str:
    """`text` unquoted when an error may repeat it (`shown_name`), else `instead`."""
    return text if _plain_name(text) else instead


def _shown_pattern(pattern: str) -> str:
    """A default's pattern for a message: as a name is (`shown_name`), its wildcards aside."""
    bare = re.sub(r"[*?\[\]!]", "", pattern)
    return repr(pattern) if not bare.strip("./:_-") or _plain_name(bare) else "(not repeated)"


def _plain_name(name: str) -> bool:
    """A name an error may repeat (`_SHOWN_NAME`) holding a letter and fewer than seven
    digits: `07700900123` or `020-7946-0000` typed where a dataset name goes is a phone
    number, never repeated."""
    return (
        bool(_SHOWN_NAME.fullmatch(name))
        and any(c.isalpha() for c in name)
        and sum(c.isdigit() for c in name) < 7
    )


# libyaml's parser when PyYAML was built with it: a 4 MB catalog loads in about a second
# instead of half a minute.
_YamlLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_catalog(path: str | Path) -> Catalog:
    """Read and validate a catalog file; any problem raises CatalogError naming the spot."""
    path = Path(path)
    try:
        raw = _parse(_catalog_text(path))
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: not valid YAML: {_yaml_problem(exc)}") from None
    except RecursionError:
        raise CatalogError(
            f"{path}: not valid YAML: lists or mappings nest too deeply to read; a catalog "
            "nests a few levels"
        ) from None
    except _Unsafe as exc:
        raise CatalogError(f"{path}: {exc}") from None
    if not isinstance(raw, dict):
        raise CatalogError(f"{path}: the catalog must be a mapping with 'version: 1' at the top")
    try:
        return Catalog.model_validate({**raw, "base_dir": path.resolve().parent})
    except ValidationError as exc:
        raise CatalogError(_describe(path, raw, exc)) from None
    except RecursionError:
        raise CatalogError(
            f"{path}: invalid catalog: lists or mappings nest too deeply to validate"
        ) from None


# A catalog larger than this is not one a person maintains: refused before it is parsed.
MAX_CATALOG_BYTES = 64 * 1024 * 1024
# YAML anchors and aliases (`&defaults` ... `*defaults`) are fine, but each alias is the
# whole anchored node again: nine aliases of nine aliases of ... (the "billion laughs")
# expand a 1 KB file to a billion values when it is validated. The document as expanded may
# hold at most this many values, and an alias may not hold itself.
MAX_EXPANDED_NODES = 1_000_000


class _Unsafe(Exception):
    """A catalog file that is refused before it is parsed or validated."""


def _catalog_text(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_CATALOG_BYTES + 1)
    except FileNotFoundError:
        raise CatalogError(f"{path}: no such catalog file") from None
    except OSError as exc:
        raise CatalogError(
            f"{path}: cannot read the catalog file ({exc.strerror or type(exc).__name__})"
        ) from None
    if len(data) > MAX_CATALOG_BYTES:
        raise CatalogError(
            f"{path}: the catalog file is larger than {MAX_CATALOG_BYTES // (1024 * 1024)} MiB"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CatalogError(
            f"{path}: the catalog is not UTF-8 text (byte {exc.start} cannot be decoded); "
            "save it as UTF-8"
        ) from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's reason and place, without the quoted text it may carry."""
    problem = getattr(exc, "problem", None) or type(exc).__name__
    problem = re.sub(r"'[^']{2,}'", "'…'", str(problem))
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return problem


def _expansion_checked(value: Any) -> Any:
    """`value` when its aliases expand to at most MAX_EXPANDED_NODES values and none holds
    itself; else _Unsafe. Counted once per distinct object (an alias is the same object)."""
    sizes: dict[int, int] = {}
    open_ids: set[int] = set()
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        item, done = stack.pop()
        if not isinstance(item, dict | list):
            continue
        key = id(item)
        children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
        if done:
            open_ids.discard(key)
            total = 1 + sum(sizes.get(id(c), 1) for c in children)
            if total > MAX_EXPANDED_NODES:
                raise _Unsafe(
                    f"the catalog's YAML aliases expand to more than {MAX_EXPANDED_NODES:,} "
                    "values (an alias repeats its whole anchor): use fewer nested aliases"
                )
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in open_ids:
            raise _Unsafe(
                "a YAML alias in the catalog refers to a node that contains it (a loop); "
                "an alias may only repeat a finished node"
            )
        open_ids.add(key)
        stack.append((item, True))
        stack.extend((c, False) for c in children if isinstance(c, dict | list))
    return value


# A catalog this large is parsed once per content and kept as JSON: even libyaml's parser
# leaves PyYAML's constructor and resolver in Python, seconds for an estate of 30,000 datasets.
CACHE_FROM_BYTES = 256 * 1024


def _parse(text: str) -> Any:
    """The YAML document; large ones through a JSON cache keyed by their content hash."""
    if len(text) < CACHE_FROM_BYTES:
        return _loaded(text)
    cache = _cache_dir() / f"catalog-{hashlib.sha256(text.encode()).hexdigest()}.json"
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        pass
    raw = _loaded(text)
    if _json_safe(raw):
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            partial = cache.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps(raw, separators=(",", ":")))
            partial.replace(cache)
        except OSError:
            pass  # a read-only home: parse again next time
    return raw


def _loaded(text: str) -> Any:
    raw = yaml.load(text, Loader=_YamlLoader)
    # An alias needs an anchor: a document with no '&' or '*' has none to expand.
    return _expansion_checked(raw) if "&" in text and "*" in text else raw


def _cache_dir() -> Path:
    # Read here, not through Settings: loading a catalog must not depend on Vault settings.
    configured = os.environ.get("ERASURE_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "erasure"


def _json_safe(value: Any) -> bool:
    """Whether JSON gives back exactly this value (string keys, no dates or sets)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_safe(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_safe(v) for v in value)
    return value is None or isinstance(value, str | int | float | bool)


def _describe(path: Path, raw: dict[str, Any], exc: ValidationError) -> str:
    lines = [f"{path}: invalid catalog ({exc.error_count()} problem(s))"]
    for problem in invalid_fields(exc):
        loc = list(problem.loc)
        where = ""
        if len(loc) >= 2 and loc[0] == "datasets" and isinstance(loc[1], int):
            entry = (raw.get("datasets") or [None] * (loc[1] + 1))[loc[1]]
            name = entry.get("name") if isinstance(entry, dict) else None
            shown = isinstance(name, str) and _plain_name(name)
            label = f"dataset {str(name).lower()!r}" if shown else f"dataset #{loc[1] + 1}"
            field = ".".join(str(p) for p in loc[2:]) or "(entry)"
            where = f"{label} field {shown_name(field)}"
        elif loc:
            where = "field " + shown_name(".".join(str(p) for p in loc))
        msg = problem.message
        if problem.kind == "extra_forbidden":
            msg = "unknown field; check the spelling against DESIGN section 2"
        lines.append(f"  {where}: {msg}" if where else f"  {msg}")
    return "\n".join(lines)
