"""Catalog connections given as `airflow_conn_id`, resolved the Airflow way.

The domain's `Warehouse` takes a resolver; this one asks the Postgres provider's hook, so
the connection may come from wherever Airflow keeps connections: `airflow connections add`,
an `AIRFLOW_CONN_<ID>` variable (a Kubernetes Secret in the Helm chart) or a secrets backend
such as Vault. Messages name the conn id, never its URI (it holds a password).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlalchemy as sa

    from erasure.catalog import Catalog
    from erasure.warehouse import Warehouse

HOW_TO_CREATE = (
    "airflow connections add {conn_id} --conn-uri 'postgresql://USER:PASSWORD@HOST:5432/DB'"
)


def postgres_url(connection: str, conn_id: str) -> sa.URL:
    """The SQLAlchemy URL of Airflow connection `conn_id` (catalog connection `connection`)."""
    from airflow.providers.postgres.hooks.postgres import PostgresHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    from erasure.errors import CatalogError

    try:
        url: sa.URL = PostgresHook(postgres_conn_id=conn_id).sqlalchemy_url
    except AirflowNotFoundException:
        raise CatalogError(
            f"catalog connection {connection!r} names the Airflow connection {conn_id!r}, which "
            f"Airflow does not know: create it with `{HOW_TO_CREATE.format(conn_id=conn_id)}`, "
            f"set AIRFLOW_CONN_{conn_id.upper()}, or store it in the secrets backend "
            "(Vault: <mount>/connections/" + conn_id + ")"
        ) from None
    except ValueError as exc:  # e.g. a bad sqlalchemy_scheme extra; the message holds no secret
        raise CatalogError(
            f"the Airflow connection {conn_id!r} (catalog connection {connection!r}) cannot be "
            f"used as a Postgres connection: {exc}"
        ) from None
    return url


def warehouse(catalog: Catalog) -> Warehouse:
    """A Warehouse for tasks: `url` connections as given, `airflow_conn_id` ones via the hook."""
    from erasure.warehouse import Warehouse

    return Warehouse(catalog, postgres_url)
