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

import glob
import hashlib
import json
import os
from collections.abc import Callable
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

from erasure.errors import CatalogError, invalid_fields
from erasure.kinds import KindConfig, KindRegistry
from erasure.model import DatasetRef

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

    def producer(self) -> str:
        return f"DAG {self.dag_id}"

    def plan_detail(self) -> dict[str, Any]:
        return {"dag_id": self.dag_id}


class ViewRebuild(RebuildTarget):
    """A view: computed on read from its cleaned upstreams, nothing to run."""

    kind: Literal["view"] = "view"

    def rebuilds(self, dataset_kind: DatasetKind) -> bool:
        return dataset_kind is DatasetKind.VIEW


REBUILD_TARGETS.register(SqlRebuild, "erasure.actions.rebuild:rebuild_by_sql")
REBUILD_TARGETS.register(DagRebuild, "erasure.actions.rebuild:rebuild_by_dag")
REBUILD_TARGETS.register(ViewRebuild, "erasure.actions.rebuild:rebuild_view")
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


class DatasetSpec(_Strict):
    namespace: str
    name: str
    connection: str | None = None
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
        return value.lower()

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


class SqlLineageSource(_Strict):
    path: str
    dialect: str | None = None


class DbtLineageSource(_Strict):
    """A dbt `manifest.json` (glob, catalog-relative): models and sources, declared lineage."""

    manifest: str
    namespace: str | None = None  # of its datasets; default: the catalog entry's of that name
    dialect: str | None = None  # for the compiled SQL; default: the manifest's adapter type


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
    datasets: list[DatasetSpec]
    lineage: LineageSources = Field(default_factory=LineageSources)
    base_dir: Path = Field(default=Path("."), exclude=True)

    @model_validator(mode="after")
    def _cross_references(self) -> Catalog:
        seen: set[tuple[str, str]] = set()
        names = {d.name for d in self.datasets}
        by_bare_name: dict[str, set[str]] = {}
        for d in self.datasets:
            by_bare_name.setdefault(d.name, set()).add(d.namespace)
        for ds in self.datasets:
            where = f"dataset {ds.name!r}"
            if (ds.namespace, ds.name) in seen:
                raise ValueError(f"{where}: declared twice in namespace {ds.namespace!r}")
            seen.add((ds.namespace, ds.name))
            if ds.connection is not None and ds.connection not in self.connections:
                raise ValueError(
                    f"{where} field 'connection': {ds.connection!r} is not declared; "
                    f"allowed: {sorted(self.connections)}"
                )
            for id_type in ds.holds_subject:
                if id_type not in self.identifiers:
                    raise ValueError(
                        f"{where} field 'holds_subject': identifier type {id_type!r} is not "
                        f"declared under 'identifiers'; allowed: {sorted(self.identifiers)}"
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
            if ds.references and ds.connection is None:
                raise ValueError(
                    f"{where} field 'connection': a dataset that references rows must name "
                    "a connection to count them in"
                )
            if ds.holds_subject and ds.connection is None and ds.owner is None:
                raise ValueError(
                    f"{where} field 'connection': a dataset that holds the subject must name "
                    "a connection to erase them in, or an 'owner' who erases them there (a "
                    "system this one cannot reach, such as the CRM the warehouse copies)"
                )
            for ref in ds.references:
                bare = ref.dataset.rpartition("/")[2]
                if bare not in names:
                    raise ValueError(
                        f"{where} field 'references': dataset {ref.dataset!r} is not in the catalog"
                    )
                if "/" not in ref.dataset and len(by_bare_name[bare]) > 1:
                    raise ValueError(
                        f"{where} field 'references': {ref.dataset!r} is a name in several "
                        f"namespaces ({', '.join(sorted(by_bare_name[bare]))}): write it as "
                        "'namespace/name'"
                    )
            if ds.encryption == "per_subject" and ds.storage != "immutable":
                raise ValueError(
                    f"{where} field 'encryption': per_subject applies to immutable storage; "
                    "set storage: immutable or drop encryption"
                )
        return self

    def dataset(self, ref: DatasetRef) -> DatasetSpec | None:
        """The catalog entry for a dataset identity or one of its explicit aliases."""
        return self._index().get((ref.namespace, ref.name))

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
        return [
            (ds, ref)
            for ds in self.datasets
            for ref in ds.references
            if self.target_of(ref) is target
        ]

    def by_name(self, name: str) -> DatasetSpec:
        """The entry named `name`, or `namespace/name`: a bare name must be unique across
        namespaces (catalog load refuses references that are not)."""
        namespace, _, bare = name.lower().rpartition("/")
        found = [
            ds for ds in self._names().get(bare, []) if not namespace or ds.namespace == namespace
        ]
        if not found:
            raise CatalogError(f"dataset {name!r} is not in the catalog")
        if len(found) > 1:
            raise CatalogError(
                f"dataset name {bare!r} is in several namespaces "
                f"({', '.join(sorted(ds.namespace for ds in found))}): qualify it as "
                "'namespace/name'"
            )
        return found[0]

    def _names(self) -> dict[str, list[DatasetSpec]]:
        cached: dict[str, list[DatasetSpec]] | None = self.__dict__.get("_by_name")
        if cached is None:
            cached = {}
            for ds in self.datasets:
                cached.setdefault(ds.name, []).append(ds)
            object.__setattr__(self, "_by_name", cached)
        return cached

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
                for alias in ds.aliases:
                    cached[(alias.namespace, alias.name.lower())] = ds
            object.__setattr__(self, "_idx", cached)
        return cached


# libyaml's parser when PyYAML was built with it: a 4 MB catalog loads in about a second
# instead of half a minute.
_YamlLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_catalog(path: str | Path) -> Catalog:
    """Read and validate a catalog file; any problem raises CatalogError naming the spot."""
    path = Path(path)
    try:
        raw = _parse(path.read_text())
    except FileNotFoundError:
        raise CatalogError(f"{path}: no such catalog file") from None
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise CatalogError(f"{path}: the catalog must be a mapping with 'version: 1' at the top")
    try:
        return Catalog.model_validate({**raw, "base_dir": path.resolve().parent})
    except ValidationError as exc:
        raise CatalogError(_describe(path, raw, exc)) from None


# A catalog this large is parsed once per content and kept as JSON: even libyaml's parser
# leaves PyYAML's constructor and resolver in Python, seconds for an estate of 30,000 datasets.
CACHE_FROM_BYTES = 256 * 1024


def _parse(text: str) -> Any:
    """The YAML document; large ones through a JSON cache keyed by their content hash."""
    if len(text) < CACHE_FROM_BYTES:
        return yaml.load(text, Loader=_YamlLoader)
    cache = _cache_dir() / f"catalog-{hashlib.sha256(text.encode()).hexdigest()}.json"
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        pass
    raw = yaml.load(text, Loader=_YamlLoader)
    if _json_safe(raw):
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            partial = cache.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps(raw, separators=(",", ":")))
            partial.replace(cache)
        except OSError:
            pass  # a read-only home: parse again next time
    return raw


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
            label = f"dataset {str(name).lower()!r}" if name else f"dataset #{loc[1] + 1}"
            field = ".".join(str(p) for p in loc[2:]) or "(entry)"
            where = f"{label} field {field!r}"
        elif loc:
            where = f"field {'.'.join(str(p) for p in loc)!r}"
        msg = problem.message
        if problem.kind == "extra_forbidden":
            msg = "unknown field; check the spelling against DESIGN section 2"
        lines.append(f"  {where}: {msg}" if where else f"  {msg}")
    return "\n".join(lines)
