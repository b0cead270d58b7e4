"""Each patch of Airflow internals (erasure_airflow.patches) is still needed by the Airflow
installed: its version is in the patch's range and Airflow's code still has the flaw the patch
works around. An upgrade that fixes the flaw turns these red, saying to remove the patch."""

from __future__ import annotations

import ast
import inspect
import textwrap
from importlib.metadata import version

import pytest
from packaging.version import Version

pytestmark = [pytest.mark.integration, pytest.mark.airflow]


def installed_airflow() -> Version:
    pytest.importorskip("airflow")
    return Version(version("apache-airflow"))


def _tree(function: object) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(function)))  # type: ignore[arg-type]


def test_the_executor_patch_applies_to_the_installed_airflow() -> None:
    from erasure_airflow.patches import executor

    installed = installed_airflow()
    assert installed in executor.AIRFLOW_VERSIONS, (
        f"Airflow {installed} is outside {executor.AIRFLOW_VERSIONS}, the versions "
        "erasure_airflow/patches/executor.py was checked on: see whether the stale-executor-event "
        f"race ({', '.join(executor.UPSTREAM)}) is fixed in it; if so remove the patch and select "
        "Airflow's LocalExecutor, else check the patch against it and widen AIRFLOW_VERSIONS"
    )


def test_the_executor_patch_is_needed_while_has_task_knows_only_queued_and_running() -> None:
    """The flaw: `has_task` answers from `queued_tasks` and `running`, keyed by the task
    instance's key, so a resumed workload handed to a worker is unknown while the parked
    workload's exit is read."""
    installed_airflow()
    from airflow.executors.base_executor import BaseExecutor
    from airflow.executors.local_executor import LocalExecutor

    from erasure_airflow.patches import executor

    remove = (
        "Airflow's executor no longer answers has_task from queued_tasks/running alone: the race "
        f"erasure_airflow/patches/executor.py works around ({', '.join(executor.UPSTREAM)}) may "
        "be fixed; check, then remove the patch and select Airflow's LocalExecutor"
    )
    assert "has_task" not in vars(LocalExecutor), remove
    consulted = {
        node.attr
        for node in ast.walk(_tree(BaseExecutor.has_task))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }
    assert consulted == {"queued_tasks", "running"}, f"{remove} (it reads {sorted(consulted)})"


def test_the_hitl_resume_patch_applies_to_the_installed_airflow() -> None:
    from erasure_airflow.patches import hitl_resume

    installed = installed_airflow()
    assert installed in hitl_resume.AIRFLOW_VERSIONS, (
        f"Airflow {installed} is outside {hitl_resume.AIRFLOW_VERSIONS}, the versions "
        "erasure_airflow/patches/hitl_resume.py was checked on: see whether the HITL answer "
        "route still locks without reloading (populate_existing); if it reloads, remove the "
        "patch (and its middleware in erasure_airflow/plugin.py), else widen AIRFLOW_VERSIONS"
    )


def test_the_hitl_resume_patch_is_needed_while_the_answer_route_locks_without_reloading() -> None:
    """The flaw: the answer route loads the task instance, then locks it with
    `session.get(..., with_for_update=...)` and no `populate_existing`, so it keeps the state
    read before the lock (`running`) when the park committed in between."""
    installed_airflow()
    from airflow.api_fastapi.core_api.routes.public import hitl

    tree = _tree(hitl.update_hitl_detail)
    locking_gets = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and any(k.arg == "with_for_update" for k in node.keywords)
    ]
    remove = (
        "Airflow's HITL answer route no longer locks the task instance with "
        "session.get(..., with_for_update=...) without populate_existing: the race "
        "erasure_airflow/patches/hitl_resume.py works around may be fixed; check, then remove "
        "the patch and its middleware in erasure_airflow/plugin.py"
    )
    assert locking_gets, remove
    assert not [
        call
        for call in locking_gets
        if any(k.arg in ("populate_existing", "execution_options") for k in call.keywords)
    ], remove
    assert "populate_existing" not in ast.unparse(tree), remove
