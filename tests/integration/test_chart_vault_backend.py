"""The Vault secrets backend settings the chart renders (connections.warehouse.source=vault),
used by Airflow's own VaultBackend against a real OpenBao, with the policy the runbook binds:
the worker finds `erasure_warehouse` where the chart says it is, and nothing else.

Kubernetes auth needs a cluster, so the backend logs in with a token carrying the same
policy; every other setting is the rendered one.
"""

from __future__ import annotations

import json
from pathlib import Path

import helm_python as helm
import hvac.exceptions
import pytest
import yaml

from erasure.keys.vault import EmbeddedOpenBao, ensure_kv_v2
from tests.helm.test_chart import BASE, CHART, merged

pytestmark = [pytest.mark.integration, pytest.mark.vault, pytest.mark.airflow]

POLICY = CHART / "vault" / "policies" / "erasure-airflow-connections.hcl"


def rendered_kwargs() -> dict[str, object]:
    values = merged(BASE, {"connections": {"warehouse": {"source": "vault"}}})
    with helm.Chart.load(CHART) as chart:
        text = chart.render(values, name="erasure")["erasure/templates/configmap-env.yaml"]
    [worker_env] = [
        d for d in yaml.safe_load_all(text) if d["metadata"]["name"] == "erasure-worker-env"
    ]
    kwargs: dict[str, object] = json.loads(worker_env["data"]["secrets-backend-kwargs"])
    return kwargs


def test_the_workers_vault_backend_finds_the_warehouse_connection(
    tmp_path: Path, airflow_db: Path
) -> None:
    from airflow.providers.hashicorp.secrets.vault import VaultBackend

    with EmbeddedOpenBao() as bao:
        root = bao.client()
        kwargs = rendered_kwargs()
        ensure_kv_v2(root, str(kwargs["mount_point"]))
        root.secrets.kv.v2.create_or_update_secret(
            path="connections/erasure_warehouse",
            secret={"conn_uri": "postgresql://erasure_wh:wh-pw@warehouse:5432/warehouse"},
            mount_point="airflow",
        )
        root.secrets.kv.v2.create_or_update_secret(
            path="connections/payroll",
            secret={"conn_uri": "postgresql://p:p@hr/p"},
            mount_point="airflow",
        )
        root.sys.create_or_update_policy(
            name="erasure-airflow-connections", policy=POLICY.read_text()
        )
        token = root.auth.token.create(policies=["erasure-airflow-connections"], ttl="1h")
        kwargs.update(url=bao.address, auth_type="token", token=token["auth"]["client_token"])
        kwargs.pop("kubernetes_role")
        kwargs.pop("auth_mount_point")
        backend = VaultBackend(**kwargs)

        conn = backend.get_connection("erasure_warehouse")
        assert conn is not None
        assert (conn.conn_type, conn.host, conn.login) == ("postgres", "warehouse", "erasure_wh")
        with pytest.raises(hvac.exceptions.VaultError):  # the policy refuses other connections
            backend.get_connection("payroll")
