"""The FAB auth manager with the erasure DAGs kept to the roles granted them by name.

Under FAB, Airflow's built-in `Viewer`, `User` and `Op` roles hold *global* DAG permissions
(`can_read`/`can_edit` on `DAGs`): they could trigger, mark, clear, delete and PATCH the
erasure runs, the extension, the reconciler and the rematerialisation DAGs a plan triggers,
and Airflow's DAG-level `access_control` can only add to such grants, never take them away.
`ErasureAuthManager` is FAB's auth manager with one rule more: on a protected DAG only a
grant naming that DAG (`DAG:<id>`, which the chart gives the DPO, Operator and ErasureTasks
roles) counts, or the FAB admin role. Nobody, Admin included, triggers `gdpr_erasure` or
`gdpr_erasure_extend` over the API (the erasure desk creates their runs in the API server
for the DPO, so an identifier typed into a run's conf never reaches Airflow's metadata DB
and every extension names the DPO who asked for it), or writes a protected run's XComs
(what its tasks pass on, such as the artefact a prompt asks about, is theirs alone).

Set `[core] auth_manager = erasure_airflow.auth.ErasureAuthManager` (the chart and `make up`
do); it is part of the installed `erasure_airflow` package, which every component imports.
Protected: the erasure DAGs below and every `rebuild: {dag_id}` of the catalog at
ERASURE_CATALOG_PATH, read once per process (restart the API server after adding one).
"""

from __future__ import annotations

import fnmatch
import logging
import os
from functools import cache
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import (
    DagAccessEntity,
    DagDetails,
)
from airflow.providers.fab.auth_manager.fab_auth_manager import FabAuthManager

log = logging.getLogger(__name__)

ERASURE_DAGS = frozenset(
    {
        "gdpr_erasure",
        "gdpr_erasure_extend",
        "erasure_reconcile",
        "erasure_reprove",
        "erasure_deadlines",
        "crm_ingest",
        "erasure_restore_replay",  # the Operator's, by name: it deletes rows of a table
    }
)
# Runs only the erasure desk creates (in the API server, for the DPO): never over the API.
DESK_ONLY = frozenset({"gdpr_erasure", "gdpr_erasure_extend"})
_READ = "can_read"
_EDIT = "can_edit"
_DELETE = "can_delete"


def is_protected(dag_id: str) -> bool:
    """Whether `dag_id` is an erasure DAG or one of the catalog's rematerialisation DAGs (an
    entry's or a default's `dag_id`, or one a producer policy's `dags` patterns allow). A
    catalog that cannot be read protects every DAG (it cannot tell which are rebuilt)."""
    rebuilds = _rebuild_dags()
    if dag_id in ERASURE_DAGS or rebuilds is None:
        return True
    names, patterns = rebuilds
    return dag_id in names or any(fnmatch.fnmatchcase(dag_id, p) for p in patterns)


@cache
def _catalog_rebuild_dags(path: str) -> tuple[frozenset[str], frozenset[str]]:
    from erasure.catalog import load_catalog

    catalog = load_catalog(path)
    targets = [ds.rebuild for ds in catalog.datasets] + [d.rebuild for d in catalog.defaults]
    names = {getattr(t, "dag_id", None) for t in targets}
    names |= {source.dag_id for source in catalog.lineage.dbt}
    patterns = frozenset(p for t in targets for p in getattr(t, "dags", None) or [])
    return frozenset(n for n in names if n), patterns


def _rebuild_dags() -> tuple[frozenset[str], frozenset[str]] | None:
    """The catalog's rebuild DAGs and DAG patterns (read once per process); None if it
    cannot be read."""
    path = os.environ.get("ERASURE_CATALOG_PATH")
    if not path:
        return frozenset(), frozenset()
    try:
        return _catalog_rebuild_dags(path)
    except Exception as exc:  # not cached: the next check reads it again
        log.error(
            "cannot read the catalog %s (%s): every DAG is kept to the roles granted it by name "
            "until it can be read (ERASURE_CATALOG_PATH)",
            path,
            exc,
        )
        return None


def _dag_action(method: str, access_entity: DagAccessEntity | None) -> str:
    """The FAB action a grant naming the DAG must carry (FAB's own mapping: a sub-entity of a
    DAG is read with can_read on the DAG and changed with can_edit on it)."""
    if method == "GET":
        return _READ
    if method == "DELETE" and access_entity is None:
        return _DELETE
    return _EDIT


class ErasureAuthManager(FabAuthManager):
    """FabAuthManager, with the protected DAGs granted by name only (see the module)."""

    def is_authorized_dag(
        self,
        *,
        method: Any,
        user: Any,
        access_entity: DagAccessEntity | None = None,
        details: DagDetails | None = None,
    ) -> bool:
        dag_id = details.id if details is not None else None
        if dag_id is not None and is_protected(dag_id):
            if dag_id in DESK_ONLY and access_entity is DagAccessEntity.RUN and method == "POST":
                return False
            if access_entity is DagAccessEntity.XCOM and method != "GET":
                return False  # what the tasks pass on (a prompt's artefact) is theirs alone
            if not self._named_grant(user, dag_id, _dag_action(method, access_entity)):
                return False
        return bool(
            super().is_authorized_dag(
                method=method, user=user, access_entity=access_entity, details=details
            )
        )

    def get_authorized_dag_ids(self, *, user: Any, method: Any = "GET", **kwargs: Any) -> set[str]:
        ids: set[str] = super().get_authorized_dag_ids(user=user, method=method, **kwargs)
        action = _dag_action(method, None)
        return {
            dag_id
            for dag_id in ids
            if not is_protected(dag_id) or self._named_grant(user, dag_id, action)
        }

    def _named_grant(self, user: Any, dag_id: str, action: str) -> bool:
        """Whether `user` holds the FAB admin role or `action` on `DAG:<dag_id>` itself."""
        roles = {getattr(role, "name", None) for role in getattr(user, "roles", None) or ()}
        if self._admin_role() in roles:
            return True
        return (action, f"DAG:{dag_id}") in set(getattr(user, "perms", None) or ())

    def _admin_role(self) -> str:
        """FAB's admin role (AUTH_ROLE_ADMIN of webserver_config.py; FAB's default "Admin")."""
        try:
            return str(self.appbuilder.app.config.get("AUTH_ROLE_ADMIN") or "Admin")  # type: ignore[union-attr]
        except (AttributeError, RuntimeError):  # no app, or outside its context (a LocalProxy)
            return "Admin"
