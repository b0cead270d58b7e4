"""End-to-end fixtures: one `airflow standalone` stack per session (the one `make up` runs),
driven only through Airflow's REST API, as the DPO would drive it through the UI.

The stack lives in a temporary directory on free loopback ports and is stopped by its
process group and OpenBao's pid at the end of the session.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from erasure.errors import ConfigError
from erasure.keys.vault import find_bao_binary
from local.demo.runner import decision_for
from local.up.stack import ERASURE_DAG, Stack, StackError, StackPaths

RUN_TIMEOUT_SECONDS = 360
POLL_SECONDS = 2.0
# Prompts are answered as soon as they are seen: the stack runs the executor and the API
# middleware that keep an answer given as a prompt appears (erasure_airflow/patches/;
# tests/e2e/test_hitl_answers.py holds them to it).
PROMPT_SETTLE_SECONDS = 0.0
# The tests' own DAGs (e.g. hitl_race), a DAG bundle beside the repo's dags/.
TEST_DAGS = Path(__file__).resolve().parent / "dags"
STOP_GRACE_SECONDS = 15.0  # then SIGKILL: nothing of a throwaway stack needs saving
ANSWER_ATTEMPTS = 3  # a call the API server fails (500, timeout) this often fails the test
SERVER_ERROR_ID = re.compile(r"look for ID (\w+)")
HITL_PARAMS = ("justification", "scheduled_by", "exemption", "standing_until")


@pytest.fixture(scope="session")
def airflow_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`make up`'s stack in a temporary directory on free ports, healthy, for the session."""
    pytest.importorskip("airflow")
    try:
        find_bao_binary()
    except ConfigError as exc:
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp("standalone")
    stack = Stack(
        StackPaths.under(root),
        **session_metadata_db(),
        extra_dag_folders={"e2e-tests": TEST_DAGS},
        # Every rebuild by DAG waits for its run in the triggerer here (the deferral and the
        # resume with the dataset it waited for); the Celery stack waits in the task.
        overrides={"ERASURE_REBUILD_WAIT_IN_TASK_SECONDS": "0"},
    )
    with running(stack, "standalone"):
        yield stack


@contextmanager
def running(stack: Stack, name: str) -> Iterator[Stack]:
    """`stack` started (the test fails, saying why, if it does not come up), then stopped."""
    started = time.monotonic()
    try:
        stack.start()
    except StackError as exc:
        pytest.fail(f"the {name} stack did not start: {exc}", pytrace=False)
    print(f"\n{name} stack healthy at {stack.base_url} in {time.monotonic() - started:.0f} s")
    try:
        yield stack
    finally:
        stack.stop(timeout=STOP_GRACE_SECONDS)


def session_metadata_db() -> dict[str, Any]:
    """A Postgres database of the session's own for Airflow (dropped at the end), as `make up`
    uses; SQLite when no local Postgres answers."""
    return {
        "metadata_database": f"erasure_airflow_e2e_{uuid.uuid4().hex[:10]}",
        "drop_metadata_on_stop": True,
    }


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium, installed with apt-get when missing and we are root."""
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("chromium is not installed and apt-get cannot install it (not root)")
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        if result.returncode != 0:
            pytest.skip(f"`{' '.join(argv)}` failed: {result.stderr.strip()[-500:]}")
    found = shutil.which("chromium")
    if not found:
        pytest.skip("apt-get installed chromium but it is not on PATH")
    return found


class AirflowApi:
    """Airflow's REST API as one logged-in user."""

    def __init__(self, stack: Stack, user: str) -> None:
        self.stack = stack
        self.user = user
        self.client = httpx.Client(base_url=stack.base_url, timeout=30, trust_env=False)
        self.client.headers["Authorization"] = f"Bearer {stack.token(user)}"
        self._first_seen: dict[tuple[str, str, int], float] = {}
        self._server_errors: dict[tuple[str, str, int], list[str]] = {}

    def close(self) -> None:
        self.client.close()

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One call, sent again after a server error or a timeout, as a person would retry.

        Airflow on SQLite answers "database is locked" under load with a 500 (rolled back, so
        safe to resend); the failure message then carries the API server's log of it.
        """
        errors: list[str] = []
        while True:
            try:
                response = self.client.request(method, path, **kwargs)
            except httpx.TimeoutException as exc:
                errors.append(f"{method} {path}: {exc!r}")
            else:
                if not response.is_server_error:
                    return response
                errors.append(f"{method} {path}: {response.text}\n{self.server_log(response.text)}")
            assert len(errors) < ANSWER_ATTEMPTS, "\n\n".join(errors)
            time.sleep(POLL_SECONDS)

    def submit(self, submission: Mapping[str, Any], expect: int = 201) -> dict[str, Any]:
        """Submit a request on the erasure desk (what its form posts); the desk's answer."""
        response = self._send("POST", "/erasure/api/v1/requests", json=dict(submission))
        assert response.status_code == expect, response.text
        return dict(response.json())

    def run(self, run_id: str) -> dict[str, Any]:
        found = self.find_run(run_id)
        assert found is not None, f"no run {run_id}"
        return found

    def find_run(self, run_id: str) -> dict[str, Any] | None:
        """The erasure run `run_id`, or None when Airflow has no such run."""
        response = self._send("GET", f"/api/v2/dags/{ERASURE_DAG}/dagRuns/{run_id}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return dict(response.json())

    def task_instances(self, run_id: str) -> list[dict[str, Any]]:
        response = self._send(
            "GET",
            f"/api/v2/dags/{ERASURE_DAG}/dagRuns/{run_id}/taskInstances",
            params={"limit": 100},
        )
        response.raise_for_status()
        return list(response.json()["task_instances"])

    def pending_prompts(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Unanswered HITL prompts whose task is parked waiting for the answer."""
        response = self._send(
            "GET", "/api/v2/dags/~/dagRuns/~/hitlDetails", params={"response_received": "false"}
        )
        response.raise_for_status()
        return [
            d
            for d in response.json()["hitl_details"]
            if d["task_instance"]["state"] == "awaiting_input"
            and (run_id is None or d["task_instance"]["dag_run_id"] == run_id)
        ]

    def answer(self, prompt: Mapping[str, Any], decision: Mapping[str, Any]) -> httpx.Response:
        """Answer one prompt as the DPO does in the form: an option and the four params."""
        ti = prompt["task_instance"]
        choice = dict(decision)
        body = {
            "chosen_options": [choice.pop("option")],
            "params_input": {
                key: (str(choice[key]) if choice.get(key) is not None else None)
                for key in HITL_PARAMS
            },
        }
        return self.client.patch(
            f"/api/v2/dags/{ti['dag_id']}/dagRuns/{ti['dag_run_id']}/taskInstances/"
            f"{ti['task_id']}/{ti['map_index']}/hitlDetails",
            json=body,
        )

    def answer_pending(self, run_id: str, decisions: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """Answer the run's settled prompts from `decisions`; the datasets answered."""
        answered = []
        now = time.monotonic()
        for prompt in self.pending_prompts(run_id):
            ti = prompt["task_instance"]
            key = (ti["dag_run_id"], ti["task_id"], ti["map_index"])
            if now - self._first_seen.setdefault(key, now) < PROMPT_SETTLE_SECONDS:
                continue
            dataset, choice = decision_for(prompt["subject"], prompt["options"], decisions)
            try:
                response = self.answer(prompt, choice)
            except httpx.TimeoutException as exc:
                failure = repr(exc)
            else:
                if not response.is_server_error:
                    assert response.status_code == 200, f"{dataset}: {response.text}"
                    answered.append(dataset)
                    continue
                failure = f"{response.text}\n{self.server_log(response.text)}"
            # An answer not saved leaves the prompt pending: like the DPO clicking again, the
            # next poll answers it again (a saved one is no longer pending).
            errors = self._server_errors.setdefault(key, [])
            errors.append(f"{dataset}: {failure}")
            assert len(errors) < ANSWER_ATTEMPTS, "\n\n".join(errors)
        return answered

    def server_log(self, error: str) -> str:
        """What the API server logged about a 500 whose body names its error ID."""
        found = SERVER_ERROR_ID.search(error)
        if found is None or not self.stack.log_path.exists():
            return "(no error ID in the response)"
        lines = self.stack.log_path.read_text(errors="replace").splitlines()
        start = next((i for i, line in enumerate(lines) if found[1] in line), None)
        if start is None:
            return f"(the API server log does not mention {found[1]})"
        return "\n".join(lines[max(0, start - 5) : start + 60])

    def wait(
        self,
        run_id: str,
        *,
        decisions: Mapping[str, Mapping[str, Any]] | None = None,
        timeout: float = RUN_TIMEOUT_SECONDS,
    ) -> tuple[str, list[str]]:
        """Wait for the run to end, answering its prompts; (final state, datasets answered)."""
        answered: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if decisions is not None:
                answered += self.answer_pending(run_id, decisions)
            state = str(self.run(run_id)["state"])
            if state in ("success", "failed"):
                return state, answered
            time.sleep(POLL_SECONDS)
        return "timed out", answered

    def task_log(self, run_id: str, task_id: str, map_index: int = -1, attempt: int = 1) -> str:
        """A task attempt's log file as Airflow wrote it."""
        folder = (
            self.stack.paths.airflow_home
            / "logs"
            / f"dag_id={ERASURE_DAG}"
            / f"run_id={run_id}"
            / f"task_id={task_id}"
        )
        if map_index >= 0:
            folder = folder / f"map_index={map_index}"
        path = folder / f"attempt={attempt}.log"
        return path.read_text(errors="replace") if path.exists() else f"(no log at {path})"

    def explain_failure(self, run_id: str) -> str:
        """Each failed task with the end of its last attempt's log, for the failure message."""
        parts = []
        for ti in self.task_instances(run_id):
            if ti["state"] == "failed":
                log = self.task_log(run_id, ti["task_id"], ti["map_index"], ti["try_number"])
                parts.append(
                    f"--- {ti['task_id']}[{ti['map_index']}] "
                    f"({ti.get('rendered_map_index') or ''}) failed; log tail:\n{log[-6000:]}"
                )
        states = ", ".join(
            f"{ti['task_id']}[{ti['map_index']}]={ti['state']}"
            for ti in self.task_instances(run_id)
        )
        return f"task states: {states}\n" + "\n".join(parts)


@pytest.fixture(scope="session")
def dpo_api(airflow_standalone: Stack) -> Iterator[AirflowApi]:
    """The REST API as the DPO (FAB role DPO): submits on the desk, answers prompts."""
    api = AirflowApi(airflow_standalone, "dpo")
    yield api
    api.close()
