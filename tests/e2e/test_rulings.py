"""Only the DPO decides, on the live stack: a prompt marked success is no ruling (issue 19).

The DPO submits a demo customer on the desk. While the run asks, Airflow's `User` and `Op`
try to mark a prompt success and are refused; the Admin marks the backup's prompt success
(the ✓ on the prompt page, over the API), and the DPO answers every other prompt, last
first. Each signed `decided` record is the answer to its own prompt; the backup has none,
the run stops at `record_rulings` naming it, and the Admin's mark is on record with its
author. The DPO clears that prompt and answers it: the request completes, nothing signed
before changed, and the completion record lists the Admin's intervention.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest

from erasure.prompts import PROMPT_PREFIX
from erasure.rulings import option_for_label
from local.bench.load import subjects, submission
from local.demo.runner import load_decisions
from local.up.stack import ERASURE_DAG, Stack
from tests.e2e.conftest import PROMPT_SETTLE_SECONDS, AirflowApi

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.vault, pytest.mark.e2e]

REF = f"DSR-RULINGS-{uuid.uuid4().hex[:8]}"
RUN_ID = f"erasure-{REF}"
MARKED = "backup.crm_nightly"
WAIT_SECONDS = 300


def _client(stack: Stack, user: str) -> httpx.Client:
    client = httpx.Client(base_url=stack.base_url, timeout=30, trust_env=False)
    client.headers["Authorization"] = f"Bearer {stack.token(user)}"
    return client


def _all_prompts_parked(dpo: AirflowApi) -> list[dict[str, Any]]:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        pending = dpo.pending_prompts(RUN_ID)
        asked = [
            ti
            for ti in dpo.task_instances(RUN_ID)
            if ti["task_id"] == "dpo_decides" and ti["map_index"] >= 0
        ]
        if pending and len(pending) == len(asked):
            time.sleep(PROMPT_SETTLE_SECONDS)
            return pending
        time.sleep(2)
    raise AssertionError(f"{RUN_ID} did not ask all its questions within {WAIT_SECONDS} s")


def _decided(auditor: httpx.Client) -> dict[str, tuple[str, str]]:
    """dataset -> (option, author) of each signed `decided` record of the request."""
    records = auditor.get(f"/erasure/api/v1/records/{REF}").json()
    return {
        r["body"]["dataset"]["name"]: (
            r["body"]["ruling"]["option"],
            r["body"]["ruling"]["author_name"],
        )
        for r in records
        if r["kind"] == "decided"
    }


def test_a_prompt_marked_success_is_no_ruling_and_shifts_none(
    airflow_standalone: Stack, dpo_api: AirflowApi
) -> None:
    stack, decisions = airflow_standalone, load_decisions()
    # A customer none of the other end-to-end tests erases (the load takes the 19 highest ids).
    dpo_api.submit(submission(REF, subjects(stack, 24)[-1]))
    prompts = _all_prompts_parked(dpo_api)
    by_dataset = {p["subject"].removeprefix(PROMPT_PREFIX): p for p in prompts}
    assert MARKED in by_dataset, sorted(by_dataset)
    ti = by_dataset[MARKED]["task_instance"]
    mark = (
        f"/api/v2/dags/{ERASURE_DAG}/dagRuns/{RUN_ID}/taskInstances/dpo_decides/{ti['map_index']}"
    )
    clients = {user: _client(stack, user) for user in ("user", "op", "admin", "auditor")}
    try:
        for user in ("user", "op"):
            refused = clients[user].patch(mark, json={"new_state": "success"})
            assert refused.status_code == 403, (user, refused.text)
        marked = clients["admin"].patch(mark, json={"new_state": "success"})
        assert marked.status_code == 200, marked.text

        expected = {}
        for dataset, prompt in sorted(
            by_dataset.items(), key=lambda kv: -kv[1]["task_instance"]["map_index"]
        ):
            if dataset == MARKED:
                continue
            choice = dict(decisions.get(dataset) or decisions["default"])
            expected[dataset] = option_for_label(choice["option"]).value
            answered = dpo_api.answer(prompt, choice)
            assert answered.status_code == 200, (dataset, answered.text)
        state, _ = dpo_api.wait(RUN_ID, timeout=WAIT_SECONDS)
        assert state == "failed", dpo_api.explain_failure(RUN_ID)
        # A standing ruling an earlier request left (the embeddings') is cited, not asked.
        decided = {k: v for k, v in _decided(clients["auditor"]).items() if k in by_dataset}
        assert {k: v[0] for k, v in decided.items()} == expected  # each its own answer
        assert {author for _, author in decided.values()} == {"dpo"}
        detail = clients["auditor"].get(f"/erasure/api/v1/records/{REF}").json()
        [failed] = [r for r in detail if r["kind"] == "failed"]
        assert "record_rulings" in failed["body"]["reason"], failed

        # The DPO clears the marked prompt (and what follows it) and answers it.
        cleared = dpo_api.client.post(
            f"/api/v2/dags/{ERASURE_DAG}/clearTaskInstances",
            json={
                "dry_run": False,
                "dag_run_id": RUN_ID,
                "task_ids": [["dpo_decides", ti["map_index"]]],
                "include_downstream": True,
                "only_failed": False,
            },
        )
        assert cleared.status_code == 200, cleared.text
        state, answered = dpo_api.wait(RUN_ID, decisions=decisions, timeout=WAIT_SECONDS)
        assert state == "success", dpo_api.explain_failure(RUN_ID)
        assert answered == [MARKED]
        after = {k: v for k, v in _decided(clients["auditor"]).items() if k in by_dataset}
        assert {k: v for k, v in after.items() if k != MARKED} == decided  # nothing changed
        assert after[MARKED][0] == option_for_label(decisions[MARKED]["option"]).value
        records = clients["auditor"].get(f"/erasure/api/v1/records/{REF}").json()
        [completed] = [r for r in records if r["kind"] == "completed"]
        interventions = completed["body"]["interventions"]
        assert [(i["target"], i["state"], i["by"]) for i in interventions] == [
            (f"dpo_decides[{ti['map_index']}]", "success", "admin")
        ]
    finally:
        for client in clients.values():
            client.close()
