"""Airflow's API server app with the erasure plugin, built as `airflow api-server` builds it,
for the tests that reach the plugin through Airflow's own auth manager; the stand-in DAGs
those tests sync into the one session metadata DB; Airflow's simple auth manager's users.

Every module syncs the same `gdpr_erasure` stand-in: whichever syncs last is what the other
modules' runs are read against, so it has every task any of them sets.
"""

from __future__ import annotations

import json
import os
import textwrap
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from erasure_airflow.api.backend import ErasureBackend

GDPR_ERASURE_STANDIN = textwrap.dedent(
    '''
    """Stand-in for the erasure DAG: the plugin reads its runs, their conf and tasks."""
    from airflow.sdk import dag, task


    @dag(dag_id="gdpr_erasure", schedule=None)
    def gdpr_erasure():
        @task
        def register():
            return "registered"

        @task
        def dpo_decides():
            return "asked"

        register() >> dpo_decides()


    gdpr_erasure()
    '''
)


def simple_auth_environment(
    home: Path, users: Mapping[str, str], run: str
) -> tuple[dict[str, str], dict[str, str]]:
    """Airflow's simple auth manager with `users` (name -> role), a password each (in a file
    under `home`): the environment, and the passwords by user."""
    passwords = {user: f"pw-{user}-{run}" for user in users}
    (home / "passwords.json").write_text(json.dumps(passwords))
    values = {
        "AIRFLOW__CORE__AUTH_MANAGER": (
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in users.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__API_AUTH__JWT_SECRET": uuid.uuid4().hex * 2,
    }
    return values, passwords


@contextmanager
def plugin_client(*, listener: bool = False) -> Iterator[Any]:
    """A TestClient over Airflow's API server app, the plugin mounted with a backend reading
    this environment; `listener`: its listener registered too, as the API server does."""
    from airflow import plugins_manager, settings
    from airflow.api_fastapi.app import create_app, purge_cached_app
    from fastapi.testclient import TestClient

    from erasure_airflow import api as erasure_api

    def reload_plugins() -> None:
        cached: list[Any] = [
            plugins_manager._get_plugins,
            plugins_manager.get_fastapi_plugins,
            plugins_manager._get_ui_plugins,
        ]
        if listener:
            from airflow.listeners.listener import get_listener_manager

            cached.append(get_listener_manager)
        for function in cached:
            function.cache_clear()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(settings, "PLUGINS_FOLDER", os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"])
        reload_plugins()
        purge_cached_app()
        erasure_api.app.state.erasure = ErasureBackend()
        try:
            with TestClient(create_app()) as client:
                yield client
        finally:
            purge_cached_app()
            reload_plugins()


def issue_tokens(client: Any, passwords: Mapping[str, str]) -> dict[str, str]:
    """A JWT per user, from Airflow's login endpoint."""
    issued = {}
    for user, password in passwords.items():
        response = client.post("/auth/token", json={"username": user, "password": password})
        assert response.status_code == 201, response.text
        issued[user] = response.json()["access_token"]
    return issued


def sync_dags(folder: Path, sources: Mapping[str, str]) -> None:
    """Write each DAG file (name -> source) into `folder` and sync them into Airflow's DB."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.utils.session import create_session

    for name, source in sources.items():
        (folder / name).write_text(source)
    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    bag = BundleDagBag(dag_folder=folder, bundle_path=folder, bundle_name="dags-folder")
    assert not bag.import_errors, bag.import_errors
    sync_bag_to_db(bag, "dags-folder", None)
