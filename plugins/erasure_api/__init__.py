"""The erasure HTTP API inside Airflow's API server, mounted at `/erasure` by erasure_plugin.

Routes (all need an authenticated Airflow user or, where noted, a machine credential):

    POST /erasure/api/v1/lineage                     act   OpenLineage RunEvent in (or API key)
    POST /erasure/api/v1/requests                    act   submit: sealed, run started
    GET  /erasure/api/v1/requests[?status=]          read  requests: status, due dates
    GET  /erasure/api/v1/requests/{ref}              read  one request, its plan and actions
    GET  /erasure/api/v1/records[?since=&status=]    read  completion records
    GET  /erasure/api/v1/records/verify              read  chain verification
    GET  /erasure/api/v1/records/{ref}               read  one request's records
    GET  /erasure/api/v1/records/{ref}/export?format=json|html   read  evidence pack
    GET  /erasure/records                            read  the auditors' HTML page
    GET  /erasure/requests/new                       act   the DPO's desk: new request form

Roles under Airflow's simple auth manager (its roles are fixed): auditors get `viewer` and
read; the DPO gets `op` (or `admin`) and acts; a viewer or user is refused acting with 403.
See `erasure_api.auth` for other auth managers and the machine credential.

Modules: app (the FastAPI app) · auth (who may call) · backend (store, Vault, built lazily)
· desk (submissions: sealed, then the run) · routes (JSON API) · pages (HTML) · settings
(API key).
"""

from __future__ import annotations

from erasure_api.app import app, create_app

__all__ = ["app", "create_app"]
