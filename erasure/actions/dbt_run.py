"""The `dbt` rebuild target: `dbt run` of the one model that writes the artefact.

The run starts after the plan's upstreams are clean (the act step's order) and is believed
only as far as dbt's own files say, read from a scratch target folder of its own (the
project's manifest, the lineage source, is left alone): exactly the planned model ran and
succeeded, it wrote the planned relation (the worker's profile and target, or a change to the
project since the manifest the plan read, could make it write another), with the planned
materialisation, and rebuilt an incremental model from scratch when the plan said so. dbt's
output is never repeated in a message: a database error there may quote a row.

dbt runs with a small environment: what a shell needs, the variables the catalog names for
its profiles (`environment:`) and dbt's `DBT_ENV_SECRET_*`; never Vault's token or this
system's and Airflow's settings, nor a `DBT_*` switch (`DBT_TARGET`, `DBT_EMPTY`, `DBT_DEFER`)
that would change what the run writes. It runs as the worker's user: it is no privilege
boundary, and the project is trusted as the catalog is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from erasure.actions.rebuild import RebuildContext, RebuildEvidence, plain_table
from erasure.catalog import DbtRebuild, shown_name
from erasure.dbt_manifest import checksum, depends_on, materialization, parse_manifest, relation
from erasure.errors import ErasureError, LineageError, RebuildFailed
from erasure.warehouse import count_rows

_PASSED = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
)  # fmt: skip


def rebuild_by_dbt(target: DbtRebuild, context: RebuildContext) -> RebuildEvidence:
    ds = context.dataset
    base = context.warehouse.catalog.base_dir
    project = base / target.project_dir
    executable = str(base / target.executable) if "/" in target.executable else target.executable
    shown = f"`dbt run --select {target.select}` in {project}"
    with tempfile.TemporaryDirectory(prefix="erasure-dbt-") as scratch:
        command = [
            executable, "run", "--select", target.select, "--project-dir", str(project),
            "--target-path", str(Path(scratch) / "target"),
            "--log-path", str(Path(scratch) / "logs"),
        ]  # fmt: skip
        if target.profiles_dir is not None:
            command += ["--profiles-dir", str(base / target.profiles_dir)]
        if target.target is not None:
            command += ["--target", target.target]
        if target.full_refresh:
            command.append("--full-refresh")
        started = datetime.now(UTC)
        returncode = _run(command, project, _environment(target), target, ds.name, shown)
        results = _json(Path(scratch) / "target" / "run_results.json")
        try:
            nodes, _, _ = parse_manifest(
                Path("manifest.json"), (Path(scratch) / "target" / "manifest.json").read_bytes()
            )
        except (OSError, LineageError):
            nodes = {}
    context.warehouse.forget_tables()
    node = _the_node_that_ran(target, ds.name, returncode, results, shown)
    _wrote_what_was_planned(target, ds.name, nodes.get(node), _database_of(context), shown)
    rows = None
    if ds.connection is not None and context.warehouse.table(ds) is not None:
        with context.warehouse.connect(ds) as conn:
            rows = count_rows(conn, plain_table(ds))
    invocation = str((results.get("metadata") or {}).get("invocation_id") or "")
    return RebuildEvidence(
        dataset=ds.name,
        method=target.kind,
        run_id=invocation or None,
        run_started_at=started,
        upstreams_done_at=context.ready_at,
        dbt_node=node,
        rows_after=rows,
        detail=f"re-created by {shown} (dbt invocation {invocation or 'unknown'}), which "
        f"ran {node} alone and reported it a success",
        rebuilt_at=datetime.now(UTC),
    )


def _run(
    command: list[str],
    project: Path,
    env: dict[str, str],
    target: DbtRebuild,
    dataset: str,
    shown: str,
) -> int:
    """dbt's exit code; its whole process group is stopped at the timeout (a wrapper such as
    `uv run dbt` leaves no dbt behind)."""
    try:
        process = subprocess.Popen(
            command,
            cwd=project,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise RebuildFailed(
            f"dataset {dataset!r}: the dbt executable {target.executable!r} is not installed on "
            "this worker; install dbt (and its adapter) there or set the dbt source's "
            "'executable', then retry"
        ) from None
    try:
        return process.wait(timeout=target.timeout_seconds)
    except BaseException as stopped:  # the timeout, or the task itself stopped (SIGTERM)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if not isinstance(stopped, subprocess.TimeoutExpired):
            raise
        raise RebuildFailed(
            f"dataset {dataset!r}: {shown} ran longer than {target.timeout_seconds} s and was "
            "stopped; retry, or raise the rebuild's timeout_seconds"
        ) from None


def _the_node_that_ran(
    target: DbtRebuild, dataset: str, returncode: int, results: dict[str, Any], shown: str
) -> str:
    """The one node the run ran, which must be the planned one and have succeeded."""
    ran = {
        str(r.get("unique_id")): str(r.get("status"))
        for r in results.get("results") or []
        if isinstance(r, dict)
    }
    # The project's on-run-start/end hooks (grants, dbt_artifacts) report as operations: not
    # models, and a failing one fails the run (its exit code).
    ran = {uid: status for uid, status in ran.items() if not uid.startswith("operation.")}
    node = target.node if target.node is not None else next(iter(ran), None)
    if returncode == 0 and node is not None and set(ran) == {node} and ran[node] == "success":
        return node
    if not ran:
        what = "no node ran"
    elif node in ran and len(ran) > 1:
        what = f"{len(ran)} nodes ran where only {shown_name(node, 'the model')} should"
    elif node in ran:
        what = f"{shown_name(node, 'the model')} ended {shown_name(ran[node], '(a status)')}"
    else:
        what = f"{shown_name(str(node), 'the model')} did not run; {len(ran)} other node(s) did"
    raise RebuildFailed(
        f"dataset {dataset!r}: {shown} exited {returncode} ({what}); run the same command there "
        "to see dbt's log (not repeated here: a database error may quote a row), fix it, and "
        "retry"
    )


def _wrote_what_was_planned(
    target: DbtRebuild,
    dataset: str,
    node: dict[str, Any] | None,
    warehouse_db: str | None,
    shown: str,
) -> None:
    """The node, as the run's own manifest has it, writes the planned relation the planned
    way: else the run may have left the planned relation as it was."""
    if node is None:
        raise RebuildFailed(
            f"dataset {dataset!r}: {shown} reported success but wrote no manifest naming its "
            "model, so what it wrote cannot be told; retry, or re-plan"
        )
    written = relation(node) or ""
    database = str(node.get("database") or "").lower()
    problems = []
    if written != dataset:
        problems.append(
            f"it wrote {shown_name(written, '(another relation)')}, not "
            f"{shown_name(dataset, 'the planned one')} (the worker's profile or target, "
            "or the project changed since the manifest the plan read)"
        )
    elif warehouse_db is not None and database and database != warehouse_db:
        problems.append(
            "it wrote that relation in another database than the connection the erasure "
            "counts it in (the worker's profile or target differs)"
        )
    if target.checksum is not None and checksum(node) != target.checksum:
        problems.append("the model's code changed since the plan")
    if target.depends_on is not None and sorted(depends_on(node)) != sorted(target.depends_on):
        problems.append("the model reads other nodes than when the plan was made")
    if target.materialized is not None and materialization(node) != target.materialized:
        problems.append(
            f"it is materialized {shown_name(materialization(node), '(otherwise)')} now, "
            f"not {target.materialized} as planned"
        )
    if target.full_refresh and (node.get("config") or {}).get("full_refresh") is False:
        problems.append("its config says full_refresh: false, so dbt did not rebuild it whole")
    if problems:
        raise RebuildFailed(
            f"dataset {dataset!r}: {shown} succeeded but "
            + "; ".join(problems)
            + ": the planned relation may still hold the subject. Set the dbt source's target "
            "(or fix the project), `dbt compile` and re-plan"
        )


def _database_of(context: RebuildContext) -> str | None:
    """The database of the connection the erasure counts the dataset in, when its URL says."""
    if context.dataset.connection is None:
        return None
    try:
        database = sa.make_url(context.warehouse.url(context.dataset.connection)).database
    except (ErasureError, sa.exc.ArgumentError):
        return None
    if not database or context.warehouse.dialect(context.dataset.connection) == "sqlite":
        return None  # a file's path is no dbt database name
    return database.lower()


def _environment(target: DbtRebuild) -> dict[str, str]:
    named = {*_PASSED, *target.environment}
    return {k: v for k, v in os.environ.items() if k in named or k.startswith("DBT_ENV_SECRET_")}


def _json(path: Path) -> dict[str, Any]:
    """dbt's run_results.json, or empty when dbt wrote none (it failed before running)."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}
