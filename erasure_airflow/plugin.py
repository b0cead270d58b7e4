"""Airflow plugin: the erasure HTTP API, the DPO's desk and the records page, under `/erasure`.

Registered by the `airflow.plugins` entry point `erasure` (pyproject.toml), so Airflow loads
it from the installed package; the plugins folder holds nothing of it (a copy there would be
loaded twice and the second refused). The app lives in `erasure_airflow.api`; this module only
registers it with Airflow's API server and adds "Erasure desk", "New erasure request" and
"Erasure records" to the UI's Browse menu (a user without the access gets the page's 403,
saying what it needs). It also adds API-server middlewares: two check what is typed into
Airflow's own routes about an erasure run before Airflow stores it (a trigger of a desk-only
DAG, a prompt's answer: erasure_airflow.api.doors), one resumes a HITL prompt answered while
its task parked (erasure_airflow.patches.hitl_resume says why); and the listener that
records an erasure run or task set to a state by hand (erasure_airflow.listener).
Loaded, it keeps the values typed into the erasure app's URLs out of the access log
(erasure_airflow.api.access_log).
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from erasure_airflow import listener as erasure_listener
from erasure_airflow.api import access_log, app
from erasure_airflow.api.doors import DeskOnlyTriggers, SealPromptAnswers
from erasure_airflow.patches.hitl_resume import ResumeAnsweredPrompts


class ErasurePlugin(AirflowPlugin):
    """Mounts the erasure FastAPI app at /erasure and links its records page in the UI."""

    name = "erasure"
    # Records an erasure run or task set to a state by hand, and who did it (in the API server).
    listeners: list[Any] = [erasure_listener]
    fastapi_apps: list[Any] = [{"app": app, "url_prefix": "/erasure", "name": "erasure"}]
    fastapi_root_middlewares: list[Any] = [
        {"middleware": access_log.KeepRedacting, "name": "erasure: access log redaction"},
        {"middleware": DeskOnlyTriggers, "name": "erasure: desk-only runs"},
        {"middleware": SealPromptAnswers, "name": "erasure: check and seal prompt answers"},
        {"middleware": ResumeAnsweredPrompts, "name": "erasure: resume answered prompts"},
    ]

    @classmethod
    def on_load(cls, *args: Any, **kwargs: Any) -> None:
        """Redact the erasure app's paths and query strings in the API server's access log."""
        access_log.install(access_log.plugin_redactor())

    external_views: list[Any] = [
        {
            "name": "Erasure desk",
            "href": "/erasure/desk",
            "destination": "nav",
            "category": "browse",
            "url_route": "erasure-desk",
        },
        {
            "name": "New erasure request",
            "href": "/erasure/requests/new",
            "destination": "nav",
            "category": "browse",
            "url_route": "erasure-new-request",
        },
        {
            "name": "Erasure records",
            "href": "/erasure/records",
            "destination": "nav",
            "category": "browse",
            "url_route": "erasure-records",
        },
    ]
