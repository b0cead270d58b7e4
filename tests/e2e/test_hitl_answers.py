"""An answer accepted with 200 is the answer the task resumes with, however soon it comes.

One run of the purpose-built `hitl_race` DAG (tests/e2e/dags) parks 100 mapped HITL prompts;
each is answered over REST 0 ms, 50 ms or 1 s after it first shows in the pending list (a
third each, by map index), with its own option and token. Before the stack's fixes (the
executor that counts a resumed task's workloads, the middleware that resumes a prompt
answered while it parked), the fastest answers failed their task as "killed externally" and
a retry asked again, or left the prompt answered and parked for ever.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from local.up.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.vault, pytest.mark.e2e]

DAG_ID = "hitl_race"
PROMPTS = 100
DELAYS = (0.0, 0.05, 1.0)  # seconds after a prompt first shows; by map index modulo 3
OPTIONS = ("keep", "delete", "escalate")  # as tests/e2e/dags/hitl_race.py offers them
RUN_TIMEOUT_SECONDS = 420


@dataclass
class Answer:
    map_index: int
    option: str
    token: str
    delay: float
    seen_at: float = 0.0
    status: int = 0
    answered_at: float = 0.0


@dataclass
class RaceRun:
    run_id: str
    state: str
    answers: dict[int, Answer]
    task_instances: list[dict[str, Any]]
    recorded: list[dict[str, Any]]
    hitl: dict[int, dict[str, Any]] = field(default_factory=dict)


def _client(stack: Stack) -> httpx.Client:
    # The admin: the race DAG is a test DAG, which the DPO's role may not trigger; its
    # prompts are assigned to nobody, so the admin may answer them (the roles are
    # tests/e2e/test_roles.py's subject, the race this file's).
    client = httpx.Client(base_url=stack.base_url, timeout=30, trust_env=False)
    client.headers["Authorization"] = f"Bearer {stack.token('admin')}"
    return client


def _wait_for_dag(client: httpx.Client, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while client.get(f"/api/v2/dags/{DAG_ID}").status_code != 200:
        assert time.monotonic() < deadline, f"{DAG_ID} (tests/e2e/dags) was never parsed"
        time.sleep(1)


def _task_instances(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    """Every task instance of the run (the API pages by at most 100)."""
    found: list[dict[str, Any]] = []
    while True:
        page = client.get(
            f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances",
            params={"limit": 100, "offset": len(found)},
        ).json()
        found += page["task_instances"]
        if not page["task_instances"] or len(found) >= page["total_entries"]:
            return found


def _answer(client: httpx.Client, lock: threading.Lock, run_id: str, answer: Answer) -> None:
    time.sleep(max(0.0, answer.seen_at + answer.delay - time.monotonic()))
    response = client.patch(
        f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/ask/{answer.map_index}/hitlDetails",
        json={"chosen_options": [answer.option], "params_input": {"token": answer.token}},
    )
    with lock:
        answer.status = response.status_code
        answer.answered_at = time.monotonic()


@pytest.fixture(scope="module")
def race(airflow_standalone: Stack) -> Iterator[RaceRun]:
    stack = airflow_standalone
    client, answering = _client(stack), _client(stack)
    try:
        _wait_for_dag(client)
        created = client.post(
            f"/api/v2/dags/{DAG_ID}/dagRuns",
            json={"logical_date": None, "conf": {"prompts": PROMPTS}},
        )
        assert created.status_code == 200, created.text
        run_id = created.json()["dag_run_id"]
        answers: dict[int, Answer] = {}
        lock = threading.Lock()
        pending: list[Future[None]] = []
        deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
        state = "running"
        with ThreadPoolExecutor(max_workers=48) as pool:
            while state not in ("success", "failed") and time.monotonic() < deadline:
                listed = client.get(
                    f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/hitlDetails",
                    params={"response_received": "false", "limit": 200},
                ).json()["hitl_details"]
                now = time.monotonic()
                for detail in listed:
                    index = int(detail["task_instance"]["map_index"])
                    if index in answers:
                        continue
                    answers[index] = answer = Answer(
                        map_index=index,
                        option=OPTIONS[(index * 7) % 3],
                        token=f"{index}-{uuid.uuid4().hex[:12]}",
                        delay=DELAYS[index % 3],
                        seen_at=now,
                    )
                    pending.append(pool.submit(_answer, answering, lock, run_id, answer))
                state = client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}").json()["state"]
            for future in pending:
                future.result()
        tis = _task_instances(client, run_id)
        xcom = client.get(
            f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/collect/xcomEntries/"
            "return_value",
            params={"deserialize": "true", "stringify": "false"},
        )
        recorded = list(xcom.json()["value"]) if xcom.status_code == 200 else []
        run = RaceRun(run_id, state, answers, tis, recorded)
        for index in answers:
            detail = client.get(
                f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/ask/{index}/hitlDetails"
            )
            run.hitl[index] = detail.json()
        yield run
    finally:
        client.close()
        answering.close()


def test_every_prompt_was_answered_once_and_accepted(race: RaceRun) -> None:
    assert sorted(race.answers) == list(range(PROMPTS))
    refused = {i: a.status for i, a in race.answers.items() if a.status != 200}
    assert not refused, f"answers not accepted: {refused}"
    for delay in DELAYS:
        assert sum(a.delay == delay for a in race.answers.values()) >= PROMPTS // 3


def test_the_run_succeeds_with_every_prompt_resumed_in_its_first_try(race: RaceRun) -> None:
    asked = [ti for ti in race.task_instances if ti["task_id"] == "ask"]
    assert len(asked) == PROMPTS
    wrong = [
        (ti["map_index"], ti["state"], ti["try_number"])
        for ti in asked
        if ti["state"] != "success" or ti["try_number"] != 1
    ]
    assert not wrong, f"(map index, state, try) of prompts that did not resume: {wrong}"
    assert race.state == "success"


def test_each_accepted_answer_is_the_one_recorded(race: RaceRun) -> None:
    assert len(race.recorded) == PROMPTS
    for index, answer in race.answers.items():
        assert race.recorded[index] == {"chosen_options": [answer.option], "token": answer.token}
        stored = race.hitl[index]
        assert stored["chosen_options"] == [answer.option]
        assert stored["params_input"] == {"token": answer.token}
