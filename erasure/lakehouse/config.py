"""Where lakehouse tables live: an Iceberg catalog (its pyiceberg properties) or a Delta root,
one typed config per kind, and `open_table`, the one factory that picks by kind.

Secrets (a catalog token, an object store key) are never written in the config: the config
names the environment variable that holds each, read when a table is opened. Relative paths
(a `file:` or plain warehouse, a SQLite catalog file, a Delta root) are relative to the
`base_dir` given to `open_table`, as the catalog's own paths are.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlparse

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from erasure.errors import describe_invalid
from erasure.kinds import KindConfig
from erasure.lakehouse.errors import LakehouseError
from erasure.lakehouse.table import LakehouseTable

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _env_names(mapping: dict[str, str]) -> dict[str, str]:
    for key, variable in mapping.items():
        if not key:
            raise ValueError("an empty property name maps to an environment variable")
        if not _ENV_NAME.match(variable):
            raise ValueError(
                f"property {key!r}: the environment variable's name must be letters, digits "
                "and underscores (the config names the variable, never the secret)"
            )
    return mapping


class IcebergCatalogConfig(KindConfig):
    """An Iceberg catalog: the properties `pyiceberg.catalog.load_catalog(name, **properties)`
    takes (`type`: sql, rest, glue, hive; `uri`, `warehouse`, ...), and the properties read
    from the environment at open time (`credential`, `token`, `s3.secret-access-key`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    kind: Literal["iceberg"] = "iceberg"
    properties: dict[str, str]
    properties_from_env: dict[str, str] = Field(default_factory=dict)

    @field_validator("properties_from_env")
    @classmethod
    def _variables_are_names(cls, mapping: dict[str, str]) -> dict[str, str]:
        return _env_names(mapping)


class DeltaConfig(KindConfig):
    """A directory (or object store prefix) of Delta tables; storage options that are secrets
    are read from the environment at open time, the others given here."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    kind: Literal["delta"] = "delta"
    root: str
    storage_options: dict[str, str] = Field(default_factory=dict)  # region, endpoint: no secrets
    storage_options_from_env: dict[str, str] = Field(default_factory=dict)

    @field_validator("storage_options_from_env")
    @classmethod
    def _variables_are_names(cls, mapping: dict[str, str]) -> dict[str, str]:
        return _env_names(mapping)


LakehouseConfig = Annotated[IcebergCatalogConfig | DeltaConfig, Field(discriminator="kind")]
_CONFIG: TypeAdapter[IcebergCatalogConfig | DeltaConfig] = TypeAdapter(LakehouseConfig)


def lakehouse_config(data: Mapping[str, Any]) -> IcebergCatalogConfig | DeltaConfig:
    """A lakehouse config from its mapping (YAML); the error names fields, never their values."""
    try:
        return _CONFIG.validate_python(dict(data))
    except ValidationError as exc:
        raise LakehouseError(
            f"lakehouse config: {describe_invalid(exc, locations=True)}; kind is iceberg "
            "(properties, properties_from_env) or delta (root, storage_options, "
            "storage_options_from_env)"
        ) from None


def open_table(
    config: IcebergCatalogConfig | DeltaConfig, name_in_catalog: str, table: str, base_dir: Path
) -> LakehouseTable:
    """Open one table: Iceberg `table` is "namespace.table" in the catalog named
    `name_in_catalog`; Delta `table` is a relative path under the root.

    The engines are imported here, not with the config: the catalog file's model imports
    this module, and pyiceberg, deltalake and pyarrow take most of a second to load."""
    if isinstance(config, IcebergCatalogConfig):
        from erasure.lakehouse.iceberg import IcebergTable

        if not re.match(r"^[^.\s]+(\.[^.\s]+)+$", table):
            raise LakehouseError(
                f"iceberg table {table!r}: name it namespace.table (e.g. shop.customers)"
            )
        return IcebergTable(load_iceberg_catalog(config, name_in_catalog, base_dir), table)
    from erasure.lakehouse.delta import DeltaLakeTable

    return DeltaLakeTable(
        delta_table_uri(config, table, base_dir),
        table,
        {**config.storage_options, **_from_env(config.storage_options_from_env, name_in_catalog)},
    )


def load_iceberg_catalog(config: IcebergCatalogConfig, name: str, base_dir: Path) -> Catalog:
    """The pyiceberg catalog of `config`, its secrets read from the environment now."""
    from pyiceberg.catalog import load_catalog

    properties = iceberg_properties(config, name, base_dir)
    try:
        return load_catalog(name, **properties)
    except Exception as exc:
        # `from None`: a driver's message may repeat the URI, password included.
        raise LakehouseError(
            f"iceberg catalog {name!r}: cannot be loaded ({type(exc).__name__}); check its "
            f"properties ({', '.join(sorted(properties))}) and that it is reachable"
        ) from None


def iceberg_properties(config: IcebergCatalogConfig, name: str, base_dir: Path) -> dict[str, str]:
    """The catalog's properties: relative paths made absolute, secrets read from the environment."""
    properties = dict(config.properties)
    if "warehouse" in properties:
        properties["warehouse"] = _absolute_location(properties["warehouse"], base_dir, uri=True)
    if "uri" in properties:
        properties["uri"] = _absolute_sqlite(properties["uri"], base_dir)
    properties.update(_from_env(config.properties_from_env, name))
    return properties


def delta_table_uri(config: DeltaConfig, table: str, base_dir: Path) -> str:
    """Where the Delta table `table` lives: its path checked, under the absolute root."""
    path = PurePosixPath(table)
    if (
        not table
        or path.is_absolute()
        or "\\" in table
        or ":" in table
        or any(part in ("..", ".", "") for part in table.split("/"))
    ):
        raise LakehouseError(
            f"delta table {table!r}: name it by a relative path under the root, without "
            "'..', '.', empty segments, a scheme or a backslash (e.g. crm/customers)"
        )
    root = _absolute_location(config.root, base_dir, uri=False)
    return f"{root.rstrip('/')}/{table}"


def _from_env(mapping: Mapping[str, str], name: str) -> dict[str, str]:
    found = {}
    for key, variable in mapping.items():
        value = os.environ.get(variable)
        if not value:
            raise LakehouseError(
                f"lakehouse {name!r}: {key!r} is read from the environment variable "
                f"{variable!r}, which is not set; set it where the erasure runs (every worker)"
            )
        found[key] = value
    return found


def _absolute_location(value: str, base_dir: Path, *, uri: bool) -> str:
    """A location with a relative local path resolved against `base_dir` (`uri`: as a
    file:// URI, else as a path); any other location as given."""
    parsed = urlparse(value)
    if parsed.scheme == "file" and not parsed.netloc:
        path = Path(parsed.path)
    elif parsed.scheme == "" or re.match(r"^[A-Za-z]:[\\/]", value):
        path = Path(value)
    else:
        return value  # s3://, gs://, abfss://, file://host/...: as given
    if not path.is_absolute():
        path = (base_dir / path).resolve()
    return path.as_uri() if uri else str(path)


def _absolute_sqlite(uri: str, base_dir: Path) -> str:
    """A SQLite catalog URI whose database file is relative, made absolute under `base_dir`."""
    from sqlalchemy.engine import make_url  # at open time: reading a catalog needs none
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(uri)
    except ArgumentError:
        return uri
    database = url.database
    if (
        url.get_backend_name() != "sqlite"
        or not database
        or database == ":memory:"
        or database.startswith("file:")
        or Path(database).is_absolute()
    ):
        return uri
    return url.set(database=str((base_dir / database).resolve())).render_as_string(
        hide_password=False
    )
