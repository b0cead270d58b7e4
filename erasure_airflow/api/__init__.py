"""The erasure HTTP API inside Airflow's API server, mounted at `/erasure` by the plugin
(erasure_airflow.plugin).

Routes (all need an authenticated Airflow user or, where noted, a machine credential; the
access each needs is in `erasure_airflow.api.auth`):

    POST /erasure/api/v1/lineage                     lineage key  OpenLineage in (no login)
    POST /erasure/api/v1/requests                    submit       submit: sealed, run started
    POST /erasure/api/v1/requests/{ref}/extend       submit       extend a deadline (the DPO)
    POST /erasure/api/v1/requests/{ref}/resume       submit       start a deleted run again
    GET  /erasure/api/v1/requests[?status=]          read         requests: status, due dates
    GET  /erasure/api/v1/requests/{ref}              read         one request, plan, actions
    GET  /erasure/api/v1/records[?since=&status=]    read         completion records
    GET  /erasure/api/v1/records/verify              read         chain verification
    GET  /erasure/api/v1/records/{ref}               read         one request's records
    GET  /erasure/api/v1/records/{ref}/export?format=json|html    read   evidence pack
    GET  /erasure/api/v1/desk[?status=]              desk         the desk, JSON
    GET  /erasure/api/v1/respondents                 respondents  who may answer prompts
    GET  /erasure/records                            read         the auditors' HTML page
    GET  /erasure/desk[?status=]                     desk         the DPO's desk
    GET  /erasure/requests/new                       submit       the new request form

Under the FAB auth manager (production, `make up`) the chart's roles grant these: Auditor
reads; DPO reads, uses the desk and submits; Operator reads and uses the desk; ErasureTasks
reads the respondents. Under the simple auth manager: viewer reads, op and admin do all.

Every POST takes a JSON body and a Bearer credential, or the UI's cookie from this origin
(csrf). The API server's access log keeps each erasure path as its route (access_log).

Modules: app (the FastAPI app) · auth (who may call) · csrf (what an acting request carries)
· access_log (what the access log keeps) · backend (store, Vault, built lazily)
· desk (submissions: sealed, then the run) · dashboard (the desk: every request) ·
respondents (who may answer) · routes (JSON API) · pages (HTML) · settings (API key).
"""

from __future__ import annotations

from erasure_airflow.api.app import app, create_app

__all__ = ["app", "create_app"]
