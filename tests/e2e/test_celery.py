"""The chart's executor on this machine: `make up --executor celery`, one request end to end,
then twenty at once held to the same bar as on the LocalExecutor (tests/e2e/load_checks.py).

A stack of its own (the CeleryExecutor, two `airflow celery worker` processes of four slots,
the local Redis as broker, or one started here when none answers; the metadata DB as result
backend) runs before the session's
LocalExecutor stack starts. The DPO submits the demo subject on the desk and answers every
prompt; every task runs on a Celery worker, the request completes, and the auditor finds a
completion record on a chain that verifies against its published heads.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from erasure.sample.seed import DEMO_SUBJECT
from local.bench.load import Load, LoadResult, submission, summary, twenty
from local.demo.runner import load_decisions
from local.up.stack import CELERY_BROKER, CELERY_EXECUTOR, Stack, StackPaths
from tests.e2e import load_checks
from tests.e2e.conftest import AirflowApi, running

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.vault, pytest.mark.e2e]

REF = f"DSR-CELERY-{uuid.uuid4().hex[:8]}"
# One line per task a Celery worker ran: `Task execute_workload[<id>] succeeded`.
CELERY_TASK = re.compile(r"execute_workload\[[0-9a-f-]+\] succeeded")


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    """The local Redis on 6379 when it answers; else a redis-server started here on a free
    port (keeping nothing on disk) and stopped by its pid."""
    if _answers("127.0.0.1", 6379):
        yield CELERY_BROKER
        return
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no Redis answers on 127.0.0.1:6379 and redis-server is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not _answers("127.0.0.1", port):
            assert server.poll() is None and time.monotonic() < deadline, (
                "redis-server did not start"
            )
            time.sleep(0.2)
        yield f"redis://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def celery_stack(tmp_path_factory: pytest.TempPathFactory, broker: str) -> Iterator[Stack]:
    stack = Stack(
        StackPaths.under(tmp_path_factory.mktemp("celery")),
        executor="celery",
        celery_broker=broker,
        metadata_database=f"erasure_airflow_celery_{uuid.uuid4().hex[:10]}",
        drop_metadata_on_stop=True,
    )
    with running(stack, "Celery"):
        yield stack


def test_a_request_completes_with_every_task_run_by_a_celery_worker(celery_stack: Stack) -> None:
    assert celery_stack.env["AIRFLOW__CORE__EXECUTOR"] == CELERY_EXECUTOR
    dpo = AirflowApi(celery_stack, "dpo")
    try:
        run_id = dpo.submit(submission(REF, DEMO_SUBJECT[1]))["run_id"]
        started = time.monotonic()
        state, answered = dpo.wait(run_id, decisions=load_decisions())
        took = time.monotonic() - started
        assert state == "success", dpo.explain_failure(run_id)
        assert answered, "the demo plan escalates artefacts: the DPO must have been asked"
        ran = [ti for ti in dpo.task_instances(run_id) if ti["state"] == "success"]
    finally:
        dpo.close()
    print(f"\none request on Celery: submit to completed in {took:.0f} s, {len(ran)} tasks")
    log = celery_stack.log_path.read_text(errors="replace")
    assert "worker1@" in log and "worker2@" in log, "both Celery workers started"
    assert len(CELERY_TASK.findall(log)) >= len(ran), "every task ran on a Celery worker"

    token = celery_stack.token("auditor")
    with httpx.Client(base_url=celery_stack.base_url, trust_env=False, timeout=60) as auditor:
        auditor.headers["Authorization"] = f"Bearer {token}"
        records = auditor.get(f"/erasure/api/v1/records/{REF}").json()
        chain = auditor.get("/erasure/api/v1/records/verify").json()
    assert "completed" in [r["kind"] for r in records], records
    assert chain["ok"], chain


@pytest.fixture(scope="module")
def celery_load(celery_stack: Stack) -> Iterator[Load]:
    with Load(celery_stack, load_decisions()) as driver:
        yield driver


@pytest.fixture(scope="module")
def runs_before(celery_load: Load) -> set[str]:
    return load_checks.runs_so_far(celery_load)


@pytest.fixture(scope="module")
def result(celery_load: Load, celery_stack: Stack, runs_before: set[str]) -> LoadResult:
    # After the demo subject's request; the subjects the LocalExecutor load takes are its own
    # stack's, so the same customers serve here.
    ran = celery_load.run(twenty(celery_stack))
    print("\n" + summary("20 requests at once on Celery", ran))
    return ran


def test_twenty_at_once_on_celery_complete_with_no_intervention(result: LoadResult) -> None:
    assert len(result.runs) == 20
    load_checks.all_complete_with_no_intervention(result)


def test_twenty_at_once_on_celery_each_have_their_records_and_the_chain_verifies(
    result: LoadResult, celery_load: Load
) -> None:
    load_checks.one_record_of_each_kind_and_the_chain_verifies(result, celery_load)


def test_twenty_at_once_on_celery_each_effect_happened_once(
    result: LoadResult, celery_load: Load
) -> None:
    load_checks.each_effect_happened_once(result, celery_load)


def test_twenty_at_once_on_celery_no_prompt_resumes_later_than_30_s(result: LoadResult) -> None:
    load_checks.no_prompt_resumes_later_than_30_s_after_its_answer(result)


def test_twenty_at_once_on_celery_share_rematerialisation_runs(
    result: LoadResult, celery_load: Load, runs_before: set[str]
) -> None:
    load_checks.rebuilds_share_runs_and_each_cites_the_one_that_served_it(
        result, celery_load, runs_before
    )
