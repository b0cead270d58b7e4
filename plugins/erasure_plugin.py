"""Airflow plugin: the erasure HTTP API, the DPO's desk and the records page, under `/erasure`.

The app lives in the `erasure_api` package beside this file; this module only registers it
with Airflow's API server and adds "Erasure desk", "New erasure request" and "Erasure records"
to the UI's Browse menu (a user without the access gets the page's 403, saying what it needs).
It also adds the API-server middleware that resumes a HITL prompt answered while its task
parked (erasure_hitl.py says why), and the listener that records an erasure run or task set
to a state by hand (erasure_listener.py).
"""

from __future__ import annotations

from typing import Any

import erasure_listener
from airflow.plugins_manager import AirflowPlugin
from erasure_api import app
from erasure_hitl import ResumeAnsweredPrompts


class ErasurePlugin(AirflowPlugin):
    """Mounts the erasure FastAPI app at /erasure and links its records page in the UI."""

    name = "erasure"
    # Records an erasure run or task set to a state by hand, and who did it (in the API server).
    listeners: list[Any] = [erasure_listener]
    fastapi_apps: list[Any] = [{"app": app, "url_prefix": "/erasure", "name": "erasure"}]
    fastapi_root_middlewares: list[Any] = [
        {"middleware": ResumeAnsweredPrompts, "name": "erasure: resume answered prompts"}
    ]
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
