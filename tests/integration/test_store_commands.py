"""`erasure store migrate|check` on real Postgres: what the Helm chart's hook Job runs."""

from __future__ import annotations

import json

import pytest

from erasure import cli
from erasure.store.database import head_revision

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


def test_migrate_brings_an_empty_store_to_head_once(
    postgres_schema_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ERASURE_STORE_URL", postgres_schema_url)
    head = head_revision()

    assert run(capsys, "store", "check")[0] == 1  # empty: an init container would wait
    code, out = run(capsys, "store", "migrate")
    assert code == 0 and out.strip().endswith(f"migrated from empty to {head}")
    code, out = run(capsys, "store", "check", "--json")
    assert code == 0 and json.loads(out)["revision"] == head
    code, out = run(capsys, "store", "migrate", "--json")
    assert code == 0 and json.loads(out) == {
        "store": json.loads(out)["store"],
        "from": head,
        "to": head,
    }
