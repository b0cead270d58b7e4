"""The erasure chart rendered offline with helm-python-sdk (Helm's Go SDK, no helm binary),
every object validated strictly against the Kubernetes schemas with kubernetes-validate.

The official Airflow chart is a dependency whose archive cannot be fetched here, so it is
disabled (`airflow.enabled=false`); what this chart hands it is checked by name instead.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from erasure import cli

CHART = Path(__file__).resolve().parents[2] / "helm"
KUBE_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
SECRETS = {
    "storeUrl": "postgresql+psycopg://erasure_app:app-pw-1@store:5432/erasure",
    "apiStoreUrl": "postgresql+psycopg://erasure_api:api-pw-1@store:5432/erasure",
    "ingestStoreUrl": "postgresql+psycopg://erasure_ingest:ingest-pw-1@store:5432/erasure",
    "storeMigrationUrl": "postgresql+psycopg://erasure_owner:owner-pw-1@store:5432/erasure",
    "warehouseUri": "postgresql://erasure_wh:wh-pw-1@warehouse:5432/warehouse",
    "lineageApiKey": "l" * 32,
    "tasksPassword": "p" * 24,
}
BASE: dict[str, Any] = {"airflow": {"enabled": False}, "connections": {"values": SECRETS}}
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "kubernetes-executor": {"airflow": {"executor": "KubernetesExecutor"}},
    "warehouse-from-vault": {"connections": {"warehouse": {"source": "vault"}}},
    "existing-secret": {"connections": {"existingSecret": "erasure-prod", "values": {}}},
    "kv-keystore": {"vault": {"keystoreKind": "kv", "snapshotRetentionDays": 90}},
    "store-grants": {
        "migration": {
            "grants": {
                "workerRole": "erasure_app",
                "apiRole": "erasure_api",
                "ingestRole": "erasure_ingest",
            }
        }
    },
    "no-network-policies": {"networkPolicies": {"enabled": False}},
    "ipblock-peers": {
        "networkPolicies": {
            "warehouse": {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [5432, 5433]}
        }
    },
}


def merged(*layers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layer in layers:
        _merge(out, copy.deepcopy(layer))
    return out


def _merge(into: dict[str, Any], layer: dict[str, Any]) -> None:
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict) and value:
            _merge(into[key], value)
        else:
            into[key] = value


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    manifests = chart.render(merged(BASE, values or {}), name="erasure", namespace="gdpr")
    return [doc for text in manifests.values() for doc in yaml.safe_load_all(text) if doc]


def by_name(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_object_validates_strictly(chart: helm.Chart, variant: str) -> None:
    docs = render(chart, VARIANTS[variant])
    assert docs
    for doc in docs:
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = "/".join(str(p) for p in exc.path)
                pytest.fail(
                    f"{doc['kind']}/{doc['metadata']['name']} ({version}) at {where}: {exc.message}"
                )


REFUSALS = [
    (
        {"airflow": {"executor": "LocalExecutor"}},
        "at '/airflow/executor': value must be one of 'CeleryExecutor', 'KubernetesExecutor'",
    ),
    (
        {"vault": {"keystoreKind": "hsm"}},
        "at '/vault/keystoreKind': value must be one of 'kv', 'transit'",
    ),
    ({"vault": {"address": "vault:8200"}}, "at '/vault/address'"),
    ({"vault": {"kvMount": "secret"}}, "at '/vault/kvMount': value must be 'erasure-kv'"),
    (
        {"vault": {"snapshotRetentionDays": -1}},
        "at '/vault/snapshotRetentionDays': minimum: got -1, want 0",
    ),
    (
        {"connections": {"values": {"storeUrl": "mysql://root:hunter2@db/erasure"}}},
        "at '/connections/values/storeUrl': 'not' failed",
    ),
    (
        {"connections": {"values": {"tasksPassword": "short"}}},
        "at '/connections/values/tasksPassword': minLength: got 5, want 16",
    ),
    (
        {"connections": {"values": {"warehouseUri": ""}}},
        "at '/connections/values/warehouseUri': minLength: got 0, want 1",
    ),
    (
        {"connections": {"warehouse": {"source": "env"}}},
        "at '/connections/warehouse/source': value must be one of 'secret', 'vault'",
    ),
    (
        {"networkPolicies": {"vault": {"to": []}}},
        "at '/networkPolicies/vault/to': minItems: got 0, want 1",
    ),
    (
        {"networkPolicies": {"store": {"ports": [70000]}}},
        "at '/networkPolicies/store/ports/0': maximum: got 70,000, want 65,535",
    ),
    (
        {"fab": {"roles": {"DPO": [["read", "DAGs"]]}}},
        "at '/fab/roles/DPO/0/0': 'read' does not match",
    ),
    (
        {"catalog": {"files": {"sql/orders.sql": "SELECT 1"}}},
        "invalid propertyName 'sql/orders.sql'",
    ),
    ({"catalog": {"files": {"catalog.yaml": None}}}, "missing property 'catalog.yaml'"),
    ({"replicas": 3}, "additional properties 'replicas' not allowed"),
    (
        {"connections": {"values": {"apiStoreUrl": ""}}},
        "at '/connections/values/apiStoreUrl': minLength: got 0, want 1",
    ),
    (
        {"migration": {"grants": {"workerRole": "app; DROP", "apiRole": "a", "ingestRole": "i"}}},
        "at '/migration/grants/workerRole': 'app; DROP' does not match",
    ),
    ({"queues": {"erasure": "Erasure Queue"}}, "at '/queues/erasure'"),
]


@pytest.mark.parametrize(("bad", "message"), REFUSALS, ids=[m for _, m in REFUSALS])
def test_the_values_schema_refuses_a_bad_value_readably(
    chart: helm.Chart, bad: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        chart.render(merged(BASE, bad), name="erasure")
    assert message in str(refused.value)
    for secret in ("hunter2", *SECRETS.values()):
        assert secret not in str(refused.value)  # a refusal never echoes a password


def test_values_yaml_documents_every_key() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    own = [i for i, line in enumerate(lines) if line and not line.startswith((" ", "#"))]
    for i in own:  # every top-level key of this chart has a comment right above it
        assert lines[i - 1].startswith("#"), f"values.yaml: {lines[i]!r} is undocumented"


def test_what_the_airflow_chart_is_handed_exists(chart: helm.Chart) -> None:
    values = chart.values["airflow"]
    docs = render(chart)
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    refs = list(_refs(values))
    env_from = yaml.safe_load(values["extraEnvFrom"])
    refs += [
        ("Secret" if "secretRef" in e else "ConfigMap", next(iter(e.values()))["name"])
        for e in env_from
    ]
    refs.append(("ConfigMap", values["apiServer"]["apiServerConfigConfigMapName"]))
    assert refs
    for kind, name in refs:
        assert (kind, name) in names, f"airflow values refer to {kind} {name}, not rendered"
    assert (
        values["apiServer"]["serviceAccount"]["name"] == chart.values["vault"]["roles"]["apiServer"]
    )
    assert values["config"]["core"]["auth_manager"] == "erasure_airflow.auth.ErasureAuthManager"


def _refs(node: Any) -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "secretKeyRef":
                yield "Secret", value["name"]
            elif key in ("configMapKeyRef", "configMap"):
                yield "ConfigMap", value["name"]
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def test_the_store_migration_is_a_hook_that_runs_the_cli(chart: helm.Chart) -> None:
    job = by_name(render(chart), "Job", "erasure-store-migrate")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "post-install,pre-upgrade"
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "erasure-airflow:0.1.0"
    assert container["command"] == ["erasure", "store", "migrate"]
    [url] = container["env"][:1]
    assert url["valueFrom"]["secretKeyRef"] == {
        "name": "erasure-connections",
        "key": "store-migration-url",
    }
    assert cli._parser().parse_args(container["command"][1:]).handler.__name__ == "_migrate"
    existing = by_name(render(chart, VARIANTS["existing-secret"]), "Job", "erasure-store-migrate")
    env = existing["spec"]["template"]["spec"]["containers"][0]["env"][0]
    assert env["valueFrom"]["secretKeyRef"]["name"] == "erasure-prod"


def test_connections_secret_and_settings(chart: helm.Chart) -> None:
    docs = render(chart)
    secret = by_name(docs, "Secret", "erasure-connections")["stringData"]
    assert secret["store-url"] == SECRETS["storeUrl"]
    assert secret["warehouse-uri"] == SECRETS["warehouseUri"]
    env = by_name(docs, "ConfigMap", "erasure-env")["data"]
    assert env["ERASURE_VAULT_AUTH_METHOD"] == "kubernetes"
    assert env["ERASURE_AIRFLOW_API_URL"] == "http://erasure-api-server:8080"
    assert by_name(docs, "ConfigMap", "erasure-worker-env")["data"] == {}
    assert not any(
        d["kind"] == "Secret"
        for d in render(chart, VARIANTS["existing-secret"])
        if d["metadata"]["name"] == "erasure-connections"
    )
    vault = render(chart, VARIANTS["warehouse-from-vault"])
    assert "warehouse-uri" not in by_name(vault, "Secret", "erasure-connections")["stringData"]
    backend = by_name(vault, "ConfigMap", "erasure-worker-env")["data"]
    assert backend["secrets-backend"] == "airflow.providers.hashicorp.secrets.vault.VaultBackend"
    kwargs = json.loads(backend["secrets-backend-kwargs"])
    assert kwargs["auth_type"] == "kubernetes"
    assert kwargs["kubernetes_role"] == "erasure-airflow-connections"  # warehouse connection only
    assert (kwargs["mount_point"], kwargs["connections_path"]) == ("airflow", "connections")


def test_openlineage_reports_to_the_plugin(chart: helm.Chart) -> None:
    secret = by_name(render(chart), "Secret", "erasure-openlineage")["stringData"]
    transport = json.loads(secret["AIRFLOW__OPENLINEAGE__TRANSPORT"])
    assert transport == {
        "type": "http",
        "url": "http://erasure-api-server:8080",
        "endpoint": "erasure/api/v1/lineage",
        "auth": {"type": "api_key", "apiKey": SECRETS["lineageApiKey"]},
    }


def test_the_erasure_dags_report_no_lineage(chart: helm.Chart) -> None:
    """Every Airflow container gets the policy; the rematerialisation DAGs still report."""
    env = by_name(render(chart), "ConfigMap", "erasure-env")["data"]
    [rule] = json.loads(env["AIRFLOW__OPENLINEAGE__EMISSION_POLICY"])
    assert rule["controls"] == {"emit": False} and rule["match_mode"] == "regex"
    silent = re.compile(rule["scope"]["dag_id"])
    assert all(silent.fullmatch(d) for d in ("gdpr_erasure", "erasure_reconcile"))
    assert not any(silent.fullmatch(d) for d in ("build_marts", "crm_ingest", "gdpr_erasure_x"))
    quiet = by_name(render(chart, {"openlineage": {"silentDags": []}}), "ConfigMap", "erasure-env")
    assert "AIRFLOW__OPENLINEAGE__EMISSION_POLICY" not in quiet["data"]


def test_fab_config_names_the_erasure_roles(chart: helm.Chart) -> None:
    docs = render(chart, {"fab": {"extraConfig": "AUTH_ROLES_MAPPING = {'dpo': ['DPO']}"}})
    config = by_name(docs, "ConfigMap", "erasure-api-server-config")["data"]["webserver_config.py"]
    namespace: dict[str, Any] = {}
    exec(compile(config, "webserver_config.py", "exec"), namespace)
    assert namespace["ERASURE_ROLES"] == ("DPO", "Auditor", "Operator", "ErasureTasks")
    assert namespace["AUTH_ROLE_PUBLIC"] is None and namespace["AUTH_USER_REGISTRATION"] is False
    assert namespace["AUTH_ROLES_MAPPING"] == {"dpo": ["DPO"]}
    roles = json.loads(by_name(docs, "ConfigMap", "erasure-fab-roles")["data"]["roles.json"])
    assert set(roles["roles"]) == set(namespace["ERASURE_ROLES"])
    assert roles["tasks_user"] == "erasure-tasks"
    job = by_name(docs, "Job", "erasure-fab-roles")
    assert job["metadata"]["annotations"]["helm.sh/hook-weight"] == "5"  # after Airflow's migration


def egress_peers(policy: dict[str, Any]) -> list[tuple[Any, list[int]]]:
    return [
        (rule.get("to"), sorted(p["port"] for p in rule["ports"]))
        for rule in policy["spec"]["egress"]
    ]


def test_network_policies_limit_who_reaches_what(chart: helm.Chart) -> None:
    np = chart.values["networkPolicies"]
    docs = render(chart)
    worker = egress_peers(by_name(docs, "NetworkPolicy", "erasure-worker-egress"))
    api = egress_peers(by_name(docs, "NetworkPolicy", "erasure-api-server-egress"))
    for destination in ("vault", "warehouse", "store"):
        assert (np[destination]["to"], np[destination]["ports"]) in worker
    assert (np["vault"]["to"], [8200]) in api and (np["store"]["to"], [5432]) in api
    assert all(peers != np["warehouse"]["to"] for peers, _ in api)  # never the warehouse
    assert any(ports == [6379] for _, ports in worker)  # Redis, CeleryExecutor
    k8s = render(chart, VARIANTS["kubernetes-executor"])
    assert not any(
        ports == [6379]
        for _, ports in egress_peers(by_name(k8s, "NetworkPolicy", "erasure-worker-egress"))
    )
    assert not any(
        d["kind"] == "NetworkPolicy" for d in render(chart, VARIANTS["no-network-policies"])
    )


def test_the_airflow_chart_is_a_conditional_dependency() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2"
    [dep] = meta["dependencies"]
    assert (dep["name"], dep["version"], dep["condition"]) == (
        "airflow",
        "1.22.x",
        "airflow.enabled",
    )
    # Not vendored: `helm dependency build helm/` fetches it (see the operator runbook).
    [status] = helm.dependency_list(CHART)
    assert status["status"] in ("missing", "ok")


def test_the_image_is_airflow_3_3_2_with_package_dags_and_plugin() -> None:
    dockerfile = (CHART / "Dockerfile").read_text()
    assert "FROM apache/airflow:3.3.2-python3.11\n" in dockerfile
    assert '"apache-airflow==3.3.2"' in dockerfile and "/opt/erasure/src" in dockerfile
    # The tested set: the versions make test installs (tests/unit/test_packaging.py).
    assert "--constraint /opt/erasure/src/constraints.txt" in dockerfile
    for provider in ("postgres", "fab", "hashicorp", "openlineage", "celery", "cncf-kubernetes"):
        assert f"apache-airflow-providers-{provider}" in dockerfile
    assert "COPY --chown=airflow:0 dags /opt/airflow/dags" in dockerfile
    # The plugin is the installed adapter package's entry point, never a plugins-folder copy.
    assert "COPY --chown=airflow:0 erasure_airflow /opt/erasure/src/erasure_airflow" in dockerfile
    assert "/opt/airflow/plugins" not in dockerfile


def worker_sets(chart: helm.Chart) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in chart.values["airflow"]["workers"]["celery"]["sets"]}


def env_of(container_values: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container_values["env"]}


def test_each_identity_runs_its_own_tasks_on_its_own_queue(chart: helm.Chart) -> None:
    """The erasure DAGs' tasks and crm_ingest each have a Celery worker set serving their
    queue, under a service account this chart renders and the Vault role of that identity;
    the default queue's workers hold no erasure identity at all."""
    roles, queues = chart.values["vault"]["roles"], chart.values["queues"]
    sets = worker_sets(chart)
    docs = render(chart)
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    env = by_name(docs, "ConfigMap", "erasure-env")["data"]
    expected = {
        queues["erasure"]: (roles["worker"], "store-url"),
        queues["crmIngest"]: (roles["crmIngest"], "ingest-store-url"),
    }
    assert set(sets) == set(expected)
    for queue, (role, store_key) in expected.items():
        worker_set = sets[queue]
        assert worker_set["queue"] == queue
        assert worker_set["serviceAccount"] == {"create": False, "name": role}
        assert role in accounts  # rendered here, for the Vault role bound to it
        values = env_of(worker_set)
        assert values["ERASURE_VAULT_K8S_ROLE"] == role
        assert values["ERASURE_STORE_URL"]["secretKeyRef"]["key"] == store_key
    assert env_of(sets[queues["erasure"]])["ERASURE_VAULT_SIGNER_ROLE"] == roles["signer"]
    assert "ERASURE_VAULT_SIGNER_ROLE" not in env_of(sets[queues["crmIngest"]])
    assert (env["ERASURE_TASK_QUEUE"], env["ERASURE_CRM_INGEST_QUEUE"]) == (
        queues["erasure"],
        queues["crmIngest"],
    )
    default = chart.values["airflow"]["workers"]
    assert default["serviceAccount"]["name"] not in {roles["worker"], roles["crmIngest"]}
    plain = env_of(default)
    assert not {"ERASURE_VAULT_K8S_ROLE", "ERASURE_STORE_URL", "ERASURE_AIRFLOW_API_PASSWORD"} & (
        set(plain)
    )
    api = env_of(chart.values["airflow"]["apiServer"])
    assert api["ERASURE_STORE_URL"]["secretKeyRef"]["key"] == "api-store-url"
    assert env["ERASURE_KEYSTORE_KIND"] == "transit"  # the default: keys never leave Vault
    secret = by_name(docs, "Secret", "erasure-connections")["stringData"]
    assert (secret["api-store-url"], secret["ingest-store-url"]) == (
        SECRETS["apiStoreUrl"],
        SECRETS["ingestStoreUrl"],
    )


def test_the_lineage_credential_is_only_where_lineage_is_produced(chart: helm.Chart) -> None:
    airflow = chart.values["airflow"]
    sets = worker_sets(chart)
    transport = "AIRFLOW__OPENLINEAGE__TRANSPORT"
    holders = {
        "default workers": env_of(airflow["workers"]),
        "crm-ingest workers": env_of(sets["crm-ingest"]),
        "scheduler": env_of(airflow["scheduler"]),
    }
    for where, values in holders.items():
        assert values[transport]["secretKeyRef"]["name"] == "erasure-openlineage", where
    assert transport not in env_of(sets["erasure"])  # silent DAGs: no credential
    assert transport not in env_of(airflow["apiServer"])  # it checks the key, never sends
    assert "erasure-openlineage" not in airflow["extraEnvFrom"]  # not in every container
    for component in ("triggerer", "dagProcessor"):
        assert "erasure-openlineage" not in json.dumps(airflow.get(component, {})), component


def test_the_migration_job_grants_the_roles_after_migrating(chart: helm.Chart) -> None:
    job = by_name(render(chart, VARIANTS["store-grants"]), "Job", "erasure-store-migrate")
    pod = job["spec"]["template"]["spec"]
    [migrate] = pod["initContainers"]
    [grants] = pod["containers"]
    assert migrate["command"] == ["erasure", "store", "migrate"]
    parsed = cli._parser().parse_args(grants["command"][1:])
    assert parsed.handler.__name__ == "_grants"
    assert (parsed.worker_role, parsed.api_role, parsed.ingest_role) == (
        "erasure_app",
        "erasure_api",
        "erasure_ingest",
    )
    assert grants["env"][0]["valueFrom"]["secretKeyRef"]["key"] == "store-migration-url"
