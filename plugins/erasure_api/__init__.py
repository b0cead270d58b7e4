"""The erasure HTTP API inside Airflow's API server, mounted at `/erasure` by erasure_plugin.

Routes (all need an authenticated Airflow user or, where noted, a machine credential):

    POST /erasure/api/v1/lineage                     act   OpenLineage RunEvent in (or API key)
    GET  /erasure/api/v1/requests[?status=]          read  requests: status, due dates
    GET  /erasure/api/v1/requests/{ref}              read  one request, its plan and actions
    POST /erasure/api/v1/requests/{ref}/scrub        act   identifier out of Airflow's DB
                                                           (or the request's task token)
    GET  /erasure/api/v1/records[?since=&status=]    read  completion records
    GET  /erasure/api/v1/records/verify              read  chain verification
    GET  /erasure/api/v1/records/{ref}               read  one request's records
    GET  /erasure/api/v1/records/{ref}/export?format=json|html   read  evidence pack
    GET  /erasure/records                            read  the auditors' HTML page

Roles under Airflow's simple auth manager (its roles are fixed): auditors get `viewer` and
read; the DPO gets `op` (or `admin`) and acts; a viewer or user is refused acting with 403.
See `erasure_api.auth` for other auth managers and the machine credentials.

Modules: app (the FastAPI app) · auth (who may call) · backend (store, Vault, built lazily)
· routes (JSON API) · pages (HTML) · scrub (the metadata-DB scrub) · settings (API keys).
"""

from __future__ import annotations

from erasure_api.app import app, create_app

__all__ = ["app", "create_app"]
