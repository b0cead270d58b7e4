"""The tested set: what `make test` installs is constraints.txt, the set the erasure image
installs (helm/Dockerfile), and the chart's executor imports with it."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#]+)$")


def pins() -> dict[str, str]:
    """constraints.txt as canonical name -> version; every line a comment or an exact pin."""
    found = {}
    for number, line in enumerate((REPO / "constraints.txt").read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        pinned = PIN.match(line.strip())
        assert pinned, f"constraints.txt:{number}: not name==version: {line!r}"
        found[canonicalize_name(pinned["name"])] = pinned["version"]
    return found


def test_every_installed_package_of_the_tested_set_is_at_its_pinned_version() -> None:
    moved = {}
    for name, version in pins().items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            moved[name] = f"{version} pinned, not installed"
            continue
        if installed != version:
            moved[name] = f"{version} pinned, {installed} installed"
    assert not moved, f"reinstall with `make .venv/.installed` or regenerate constraints: {moved}"


def test_what_the_project_requires_is_pinned_and_admitted_by_its_own_ranges() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    required = [*project["dependencies"]]
    for extra in ("airflow", "dev"):
        required += project["optional-dependencies"][extra]
    pinned = pins()
    for text in required:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is required but not in constraints.txt"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {name} {pinned[name]}, outside pyproject's {requirement}"
        )


def test_the_charts_executor_imports_with_the_tested_set() -> None:
    """celery 5.7.0 broke the Celery provider 3.26.0 at import (the scheduler exits at start):
    the pinned pair imports."""
    from airflow.providers.celery.executors.celery_executor import CeleryExecutor

    assert CeleryExecutor.__name__ == "CeleryExecutor"
    assert pins()["celery"] == metadata.version("celery")


def test_the_charts_other_executor_imports_and_builds_a_task_pod_with_the_tested_set() -> None:
    """`airflow.executor: KubernetesExecutor` needs the cncf-kubernetes provider (in Airflow 3
    the executor ships there): it imports, and builds an erasure task's pod from a base worker
    pod as the chart's (the worker service account, the image), with the pinned client. No
    cluster here: whether the pod runs is not tested (docs/operator-runbook.md, Executors)."""
    from airflow.providers.cncf.kubernetes.executors.kubernetes_executor import (
        KubernetesExecutor,
    )
    from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator
    from kubernetes.client import models as k8s

    assert KubernetesExecutor.__name__ == "KubernetesExecutor"
    base = k8s.V1Pod(
        spec=k8s.V1PodSpec(
            service_account_name="airflow-worker",
            containers=[k8s.V1Container(name="base", image="erasure-airflow:0.1.0")],
        )
    )
    args = ["python", "-m", "airflow.sdk.execution_time.execute_workload", "--json-string", "{}"]
    pod = PodGenerator.construct_pod(
        dag_id="gdpr_erasure",
        task_id="verify",
        pod_id="gdpr-erasure-verify",
        try_number=1,
        kube_image="erasure-airflow:0.1.0",
        date=None,
        args=args,
        pod_override_object=None,
        base_worker_pod=base,
        namespace="gdpr",
        scheduler_job_id="1",
        run_id="erasure-DSR-2026-0042",
    )
    assert pod.spec.service_account_name == "airflow-worker"
    [container] = pod.spec.containers
    assert (container.image, container.args) == ("erasure-airflow:0.1.0", args)
    assert (pod.metadata.labels["dag_id"], pod.metadata.labels["task_id"]) == (
        "gdpr_erasure",
        "verify",
    )
    assert pins()["apache-airflow-providers-cncf-kubernetes"] == metadata.version(
        "apache-airflow-providers-cncf-kubernetes"
    )


def test_a_celery_worker_loads_the_domain_and_the_task_plugins_before_its_pool_forks() -> None:
    """The chart's `[celery] celery_config_options` (helm/values.yaml): Airflow's own Celery
    configuration; loaded, the modules every erasure task imports; and when a worker starts
    (`worker_init`, before its pool forks), the plugins every task would otherwise load (this
    package's with its API, the OpenLineage listener), never in the scheduler."""
    import subprocess
    import sys

    probe = (
        "import sys; import erasure_airflow.celery_config as c; "
        "from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG; "
        "from airflow.sdk import plugins_manager; from celery.signals import worker_init; "
        "print(c.CELERY_CONFIG == DEFAULT_CELERY_CONFIG, 'erasure.workflow' in sys.modules, "
        "'sqlglot' in sys.modules, 'erasure_airflow.plugin' not in sys.modules); "
        "worker_init.send(sender=None); "
        "from airflow.sdk.listener import get_listener_manager; "
        "print(plugins_manager._get_plugins.cache_info().currsize, "
        "'erasure_airflow.plugin' in sys.modules, get_listener_manager.cache_info().currsize, "
        "get_listener_manager().has_listeners)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    lines = done.stdout.splitlines()
    assert lines[-2:] == ["True True True True", "1 True 1 True"], done.stderr[-2000:]
    values = (REPO / "helm" / "values.yaml").read_text()
    assert "celery_config_options: erasure_airflow.celery_config.CELERY_CONFIG" in values
