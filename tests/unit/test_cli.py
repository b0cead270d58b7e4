"""The `erasure` command as scripts and people use it: stdout documents, stderr errors."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from erasure.cli import main
from erasure.sample.seed import DEMO_SUBJECT, build_demo


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("cli") / "demo"
    build_demo(target)
    return target / "catalog.yaml"


@pytest.fixture(autouse=True)
def store_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test's own erasure store: plan, closure and ingest keep the lineage there."""
    url = f"sqlite:///{tmp_path}/erasure.db"
    monkeypatch.setenv("ERASURE_STORE_URL", url)
    return url


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json_is_a_document_without_the_identifier(
    catalog: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(DEMO_SUBJECT[1].upper() + "\n"))
    code, out, err = run(
        capsys, "plan", "--catalog", str(catalog), "--subject", "email=-", "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) >= {"subject", "roots", "items", "coverage", "gaps", "cycles"}
    assert doc["subject"]["type"] == "email"
    actions = {i["action"] for i in doc["items"]}
    assert actions == {
        "erase_rows",
        "rebuild",
        "aggregate_ok",
        "crypto_shred",
        "escalate",
        "insert_tombstone",
    }
    assert all(set(i["dataset"]) == {"namespace", "name"} for i in doc["items"])
    assert "alice" not in out.lower()


def test_plan_table_names_every_action_with_its_reason(
    catalog: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "plan", "--catalog", str(catalog), "--subject", "customer_id=C0001")
    assert code == 0
    assert "erase_rows       crm.customers" in out
    assert "aggregate_ok     agg.customers_by_region_month  [rule 6] k-anonymous" in out
    assert "feedback: marts.customer_segments -> marts.segment_history" in out


def test_errors_go_to_stderr_with_exit_2_and_never_echo_the_value(
    catalog: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "plan", "--catalog", str(catalog), "--subject", "passport=SECRET-123"
    )
    assert (code, out) == (2, "")
    assert "allowed: customer_id, email, phone" in err and "SECRET" not in err
    code, _, err = run(capsys, "plan", "--catalog", "/nonexistent.yaml", "--subject", "email=x@y.z")
    assert code == 2 and "no such catalog file" in err


def test_lineage_sql_prints_the_design_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "ltv.sql"
    script.write_text(
        "CREATE TABLE marts.ltv AS SELECT c.id AS id, SUM(o.amount) AS total "
        "FROM crm.customers c JOIN crm.orders o ON o.customer_id = c.id "
        "WHERE o.status = 'paid' GROUP BY c.id; SELECT * FROM marts.ltv"
    )
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps({"crm.customers": ["id"], "crm.orders": ["customer_id", "amount", "status"]})
    )
    code, out, _ = run(
        capsys, "lineage", "sql", "--dialect", "postgres", "--schema", str(schema), str(script)
    )
    assert code == 0
    doc = json.loads(out)
    edges = {(e["source"], e["target"], e["type"], e["subtype"]) for e in doc["edges"]}
    assert ("crm.orders.amount", "marts.ltv.total", "DIRECT", "AGGREGATION") in edges
    assert ("crm.orders.status", "marts.ltv.total", "INDIRECT", "FILTER") in edges
    assert ("crm.orders.customer_id", "marts.ltv.id", "INDIRECT", "JOIN") in edges
    assert ("marts.ltv.total", "<output>.total", "DIRECT", "IDENTITY") in edges
    assert doc["gaps"] == []


def test_lineage_sql_completes_names_with_the_default_db_and_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "contacts.sql"
    script.write_text("CREATE TABLE marts.contacts AS SELECT * FROM customers")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"ANALYTICS.CRM.CUSTOMERS": ["id", "email"]}))
    code, out, err = run(
        capsys,
        "lineage",
        "sql",
        "--dialect",
        "snowflake",
        "--schema",
        str(schema),
        "--default-db",
        "analytics",
        "--default-schema",
        "crm",
        str(script),
    )
    assert code == 0, err
    doc = json.loads(out)
    assert [(e["source"], e["target"]) for e in doc["edges"]] == [
        ("analytics.crm.customers.email", "analytics.marts.contacts.email"),
        ("analytics.crm.customers.id", "analytics.marts.contacts.id"),
    ]
    assert doc["gaps"] == []
    code, out, _ = run(capsys, "lineage", "sql", "--dialect", "snowflake", str(script))
    assert json.loads(out)["edges"][0]["source"] == "customers.*"  # as written without them


def test_lineage_sql_refuses_defaults_the_dialect_cannot_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "report.sql"
    script.write_text("SELECT id FROM orders")
    code, out, err = run(
        capsys,
        "lineage",
        "sql",
        "--dialect",
        "mysql",
        "--default-db",
        "shop",
        "--default-schema",
        "crm",
        str(script),
    )
    assert (code, out) == (2, "")
    assert "give one of them" in err


def test_lineage_closure_walks_direct_and_indirect_edges(
    catalog: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "lineage", "closure", "--catalog", str(catalog), "--from", "crm.orders", "--json"
    )
    assert code == 0
    names = {d["name"] for d in json.loads(out)["datasets"]}
    assert "marts.popular_products" in names  # reached only through a filter
    assert "ops.stock_levels" not in names
    assert not json.loads(out)["truncated"]
    code, out, _ = run(
        capsys,
        "lineage",
        "closure",
        "--catalog",
        str(catalog),
        "--from",
        "crm.orders",
        "--max-nodes",
        "3",
        "--json",
    )
    assert json.loads(out)["truncated"]


def test_lineage_ingest_dry_run_summarises_runs(
    catalog: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = catalog.parent / "lineage" / "events.jsonl"
    code, out, _ = run(capsys, "lineage", "ingest", "--dry-run", str(events))
    assert code == 0
    assert out.startswith("9 event(s) parsed (dry run); 6 run(s)")
    assert "FAIL" in out and "embed_customers_v2.run" in out


def test_the_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    lines = capsys.readouterr().out.splitlines()
    listed = [line.split()[0] for line in lines if line[:4] == "    " and line[4:5].isalpha()]
    assert listed == [
        "demo",
        "plan",
        "lineage",
        "catalog",
        "suppression",
        "requests",
        "restore",
        "audit",
        "keys",
        "store",
    ]


def test_lineage_ingest_imports_only_what_it_uses(tmp_path: Path) -> None:
    # Its time is an operator's at every run: no Alembic on a migrated store, no Vault
    # client, no numpy (the index is only read or built when due).
    import subprocess

    from erasure.store import open_store

    url = f"sqlite:///{tmp_path}/erasure.db"
    open_store(url).close()
    events = tmp_path / "events.jsonl"
    events.write_text("")
    program = (
        "import sys; from erasure.cli import main; "
        f"main(['lineage', 'ingest', '--json', '--store', {url!r}, {str(events)!r}]); "
        "print([m for m in ('alembic', 'hvac', 'numpy', 'yaml') if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_lineage_ingest_workers_must_be_a_count(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["lineage", "ingest", "--workers", value, str(tmp_path / "events.jsonl")])
    err = capsys.readouterr().err
    assert "--workers: must be a whole number from 0 to" in err
    assert f"'{value}'" not in err  # what was typed is not repeated


@pytest.mark.parametrize(
    ("command", "option", "value", "expected"),
    [
        (["plan", "--catalog", "c.yaml", "--subject", "email=-"], "--max-nodes", "0", "from 1"),
        (["plan", "--catalog", "c.yaml", "--subject", "email=-"], "--max-nodes", "-5", "from 1"),
        (["plan", "--catalog", "c.yaml", "--subject", "email=-"], "--max-nodes", "2.5", "from 1"),
        (["plan", "--catalog", "c.yaml", "--subject", "email=-"], "--max-nodes", "9" * 5000,
         "from 1"),
        (["lineage", "closure", "--catalog", "c.yaml", "--from", "t"], "--max-nodes", "0",
         "from 1"),
        (["lineage", "closure", "--catalog", "c.yaml", "--from", "t"], "--max-depth", "-1",
         "from 0"),
        (["lineage", "purge"], "--retention-days", "-30", "from 1"),
        (["lineage", "purge"], "--retention-days", "0", "from 1"),
    ],
)  # fmt: skip
def test_bounds_are_refused_by_the_command_line_with_the_allowed_range(
    command: list[str], option: str, value: str, expected: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        main([*command, f"{option}={value}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: must be a whole number {expected}" in err
    assert "Traceback" not in err and f"'{value}'" not in err and f"={value}" not in err


def test_a_stray_argument_is_not_repeated(capsys: pytest.CaptureFixture[str]) -> None:
    """An identifier typed where no argument belongs never comes back on the terminal."""
    stray = "jane.stray@example.org"
    with pytest.raises(SystemExit):
        main(["lineage", "sql", "-", stray])
    with pytest.raises(SystemExit):
        main(["audit", stray])
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err and "invalid choice" in err
    assert stray not in err


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        ("customer_id=C0001\x00zq", "a customer_id holds no spaces or control characters"),
        ("customer_id=" + "zq" * 400, "--subject: the identifier must be a non-empty text of"),
        ("customer_id=zq\udc80", "--subject: the identifier must be valid Unicode text"),
        ("customer_id=zq.canary@example.org", "looks like an email address, not a customer_id"),
        ("email=zq.canary@@example.org", "this cannot be an email"),
    ],
)
def test_plan_checks_the_identifier_as_the_desk_does_without_repeating_it(
    catalog: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    subject: str,
    expected: str,
) -> None:
    """Typed on the command line or read from stdin, a malformed identifier stops the plan
    before anything queries the warehouse (a NUL would fail a Postgres query, a lone
    surrogate the keyed hash)."""
    id_type, _, value = subject.partition("=")
    monkeypatch.setattr(sys, "stdin", io.StringIO(value + "\n"))
    code, out, err = run(capsys, "plan", "--catalog", str(catalog), "--subject", f"{id_type}=-")
    assert code == 2 and out == ""
    assert expected in err and "zq" not in err


def test_an_abbreviated_option_is_not_expanded_or_repeated(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """argparse repeats an ambiguous abbreviation whole, value and all: none are taken."""
    typed = "--s=email=jane.abbrev@example.org"
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--catalog", "c.yaml", "--subject", "email=-", typed])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "jane.abbrev" not in err and "unrecognized arguments (not repeated here)" in err
