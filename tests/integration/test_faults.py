"""Fault x task: every task of an erasure run with each fault injected for real, then cleared.

One request per run is driven task by task as gdpr_erasure wires them (each task opens its own
Services, as a worker does). At each task the run's faults strike in turn, walked through the
task's fault points (`fault_injection`); after every strike the fault is removed and the
request checked: not complete, and no completion record that is not true. The task is run
again (what clearing it does), and once it succeeds the whole state (request, action log and
its evidence, records, rulings, tombstones, keys, every warehouse table) must equal what the
run without faults reached after the same task: nothing lost, nothing done twice. The matrix
goes to docs/reliability.md (its own section of it); the second test fails (and rewrites it)
when the committed section differs from what this run produced.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from erasure import workflow
from erasure.actions.rebuild import RunOutcome
from erasure.audit.records import RecordKind, RecordLedger
from erasure.config import Settings
from erasure.errors import ErasureError
from erasure.keys.vault import EmbeddedOpenBao
from erasure.model import Action, DatasetRef
from erasure.pseudonym import normalise, subject_hash
from erasure.registry.action_log import ActionLog, ActionStatus
from erasure.registry.requests import CLOSED_STATUSES, RequestBook, RequestStatus
from erasure.sample.embedded import ARCHIVE, anchor_path_for, open_demo
from erasure.sample.lake import drop_lake
from erasure.sample.rematerialise import rematerialise
from erasure.sample.seed import CRM_EXPORT, DEMO_SUBJECT
from erasure.services import Services
from erasure.store.database import open_store
from tests.integration.fault_injection import (
    ChildOutcome,
    Point,
    PostgresAdmin,
    PostgresStoreOutage,
    Probe,
    Site,
    SqliteStoreOutage,
    cut_warehouse,
    kill_openbao,
    run_killed,
)
from tests.integration.published import publish
from tests.integration.workflow_support import ANSWERS, CONF, register

pytestmark = [pytest.mark.integration, pytest.mark.vault, pytest.mark.postgres]

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reliability.md"
SUBJECT_ID = "C0001"  # the demo subject's customer id: its archive key is named by its hash
NOTE_CANARY = "faults-note-canary-5d0c8e2b7f3a41c6-9e1b2a7d4c8f06e3"
# What an error message must never show: the subject's identifiers, the parked notes.
NEVER_SHOWN = (DEMO_SUBJECT[1], "alice.smith", SUBJECT_ID, NOTE_CANARY)


# ---------------------------------------------------------------------------------------------
# The estate a run acts on, and the tasks of the DAG as plain calls


@dataclass
class Run:
    """One request on one estate, driven task by task."""

    name: str
    backend: str  # "SQLite" | "Postgres": where the erasure store and the warehouse live
    settings: Settings
    ref: str
    outage: SqliteStoreOutage | PostgresStoreOutage
    bao: EmbeddedOpenBao
    admin: PostgresAdmin
    triggers: Path = Path()  # one line per rematerialisation DAG triggered, across processes
    failing_dags: set[str] = field(default_factory=set)
    escalations: list[DatasetRef] = field(default_factory=list)
    probe: Probe | None = None  # the fault's, while a task runs with one
    last_part: int | None = None  # a try walking one part of a task stops after it

    @property
    def run_id(self) -> str:
        return f"erasure-{self.ref}"

    def services(self) -> Services:
        return Services.open(self.settings)


@dataclass(frozen=True)
class Task:
    """One step of gdpr_erasure as the worker runs it: a task, or one artefact's step of an
    action task (which walks its artefacts in this order, and after a failure is run again
    from the first: the steps done return their evidence, as `tasks_of`'s later ones do)."""

    name: str  # as the task's log names it: "erase_rows crm.orders"
    call: Callable[[Services, Run, DatasetRef | None], None]
    dataset: DatasetRef | None = None
    rebuilt_by_dag: str | None = None  # rebuild tasks: the DAG that rebuilds it, or SQL (None)
    parts: int = 0  # a task acting on several items: faults walk each item's points in turn


def trigger_for(run: Run, svc: Services) -> workflow.TriggerDag:
    """The in-process rematerialisation trigger (the embedded default's), logging each run."""

    def trigger(dag_id: str, ready_at: datetime) -> RunOutcome:
        with run.triggers.open("a") as log:
            log.write(dag_id + "\n")
        if dag_id in run.failing_dags:
            return RunOutcome(run_id=f"manual__{dag_id}", state="failed")
        rematerialise(svc.catalog, svc.warehouse, dag_id)
        return RunOutcome(run_id=f"manual__{dag_id}", state="success", in_process=True)

    return trigger


def dag_runs(run: Run) -> int:
    """How many rematerialisation DAG runs the request's tasks triggered so far."""
    return len(run.triggers.read_text().splitlines()) if run.triggers.exists() else 0


def plan_task(svc: Services, run: Run, _ds: DatasetRef | None) -> None:
    # What the plan task hands to XCom is read in the same task.
    workflow.plan_request(svc, run.ref)
    workflow.pending_escalations(svc, run.ref)
    svc.requests.require(run.ref)


def record_rulings(svc: Services, run: Run, _ds: DatasetRef | None) -> None:
    # One task answers every prompt of the plan, in the order they were mapped. A try that
    # walks one prompt's points stops after it; the walk of the next prompt goes on from there.
    last = len(run.escalations) if run.last_part is None else run.last_part + 1
    for part, dataset in enumerate(run.escalations[:last]):
        if run.probe is not None:
            run.probe.current = part
        workflow.rule(svc, run.ref, dataset, ANSWERS[dataset.name])
        if run.probe is not None:
            run.probe.current = None


def tombstone_task(svc: Services, run: Run, _ds: DatasetRef | None) -> None:
    workflow.tombstone(svc, run.ref)


def erase_task(svc: Services, run: Run, ds: DatasetRef | None) -> None:
    assert ds is not None
    workflow.erase(svc, run.ref, ds)


def shred_task(svc: Services, run: Run, ds: DatasetRef | None) -> None:
    assert ds is not None
    workflow.shred(svc, run.ref, ds)


def rebuild_task(svc: Services, run: Run, ds: DatasetRef | None) -> None:
    assert ds is not None
    workflow.rebuild_artefact(svc, run.ref, ds, trigger_for(run, svc))


def aggregate_task(svc: Services, run: Run, ds: DatasetRef | None) -> None:
    assert ds is not None
    workflow.confirm_aggregate(svc, run.ref, ds)


def verify_task(svc: Services, run: Run, _ds: DatasetRef | None) -> None:
    workflow.verify(svc, run.ref)


def complete_task(svc: Services, run: Run, _ds: DatasetRef | None) -> None:
    workflow.complete(svc, run.ref)


# The action tasks of gdpr_erasure, each a step per artefact of the plan's action, in a DAG
# order.
MAPPED = [
    (Action.ERASE_ROWS, "erase_rows", erase_task),
    (Action.CRYPTO_SHRED, "crypto_shred", shred_task),
    (Action.REBUILD, "rebuild", rebuild_task),
    (Action.AGGREGATE_OK, "aggregate_ok", aggregate_task),
]


def tasks_of(svc: Services, ref: str) -> list[Task]:
    """The tasks of the request's run in an order gdpr_erasure allows."""
    plan = svc.plans.get(ref, 1)
    prompts = workflow.pending_escalations(svc, ref)
    tasks = [Task("plan", plan_task), Task("tombstone", tombstone_task)]
    for action, name, call in MAPPED:
        for ds in workflow.items_for(plan, action):
            target = svc.catalog.require(ds).rebuild if action is Action.REBUILD else None
            dag_id = getattr(target, "dag_id", None)  # None: rebuilt by SQL
            tasks.append(Task(f"{name} {ds.name}", call, ds, dag_id))
    return [
        *tasks,
        Task(f"record_rulings ({len(prompts)} prompts)", record_rulings, parts=len(prompts)),
        Task("verify", verify_task),
        Task("complete", complete_task),
    ]


# ---------------------------------------------------------------------------------------------
# The faults: each strikes before the task starts (no sites) or at the points of its sites


class Fault:
    column = ""
    how = ""
    sites: frozenset[Site] = frozenset()
    killed = False  # the worker process is SIGKILLed (the task runs in a forked child)
    stops_at_start = False  # the task fails opening its services, before it does anything
    after = False  # strikes once the statement ran or the request returned

    def applies(self, task: Task) -> bool:
        return True

    def before(self, run: Run, task: Task) -> None:
        """Strike before the task starts (faults without sites)."""

    def strike(self, run: Run, point: Point, conn: sa.Connection | None) -> None:
        """Strike at `point`, inside the task."""

    def clear(self, run: Run) -> None:
        """Remove the fault: the operator fixed what was wrong."""


class VaultDownAtStart(Fault):
    column = "Vault down at start"
    how = "OpenBao is SIGKILLed before the task starts; restarted (raft storage) to clear"
    stops_at_start = True

    def before(self, run: Run, task: Task) -> None:
        kill_openbao(run.bao)

    def clear(self, run: Run) -> None:
        run.bao.start()


class VaultDownInside(VaultDownAtStart):
    column = "Vault down inside"
    how = (
        "OpenBao is SIGKILLed just before the task's first Vault request, then just before "
        "each Vault write (signing a record, destroying a key); restarted to clear"
    )
    sites = frozenset({Site.VAULT_FIRST, Site.VAULT_WRITE})
    stops_at_start = False

    def before(self, run: Run, task: Task) -> None:
        pass

    def strike(self, run: Run, point: Point, conn: sa.Connection | None) -> None:
        kill_openbao(run.bao)


class StoreDownAtStart(Fault):
    how = (
        "the erasure store is unreachable before the task starts (SQLite: its file is gone "
        "from its volume; Postgres: its database refuses connections, backends terminated)"
    )
    stops_at_start = True

    def __init__(self, backend: str) -> None:
        self.column = f"Store down at start ({backend})"

    def before(self, run: Run, task: Task) -> None:
        run.outage.cut()

    def clear(self, run: Run) -> None:
        run.outage.restore()


class StoreDownInside(StoreDownAtStart):
    how = (
        "the erasure store becomes unreachable just before the first write of each of the "
        "task's store transactions in turn (the connection in use dies with it)"
    )
    sites = frozenset({Site.STORE_WRITE})
    stops_at_start = False

    def __init__(self, backend: str) -> None:
        self.column = f"Store down inside ({backend})"

    def before(self, run: Run, task: Task) -> None:
        pass

    def strike(self, run: Run, point: Point, conn: sa.Connection | None) -> None:
        assert conn is not None
        run.outage.cut(conn, conn.engine)


class WarehouseCut(Fault):
    how = (
        "the warehouse connection is cut after the task's first warehouse statement, then "
        "after the first write (DELETE, DROP/CREATE) of each warehouse transaction, before it "
        "commits (SQLite: the connection closed; Postgres: pg_terminate_backend)"
    )
    sites = frozenset({Site.WAREHOUSE_FIRST, Site.WAREHOUSE_WRITE})
    after = True

    def __init__(self, backend: str) -> None:
        self.column = f"Warehouse cut ({backend})"

    def strike(self, run: Run, point: Point, conn: sa.Connection | None) -> None:
        assert conn is not None
        cut_warehouse(conn, run.admin)


class RebuildFails(Fault):
    column = "Rebuild fails"
    how = (
        "the artefact's rematerialisation DAG run ends `failed`, or its rebuild SQL fails "
        "(a column that does not exist); fixed to clear"
    )
    _broken: tuple[Path, str] | None = None

    def applies(self, task: Task) -> bool:
        return task.name.startswith("rebuild ")

    def before(self, run: Run, task: Task) -> None:
        assert task.dataset is not None
        if task.rebuilt_by_dag is not None:
            run.failing_dags.add(task.rebuilt_by_dag)
            return
        catalog = Path(str(run.settings.catalog_path))
        good = catalog.read_text()
        head = f"CREATE TABLE {task.dataset.name} AS\n        SELECT "
        assert good.count(head) == 1, task.dataset.name
        catalog.write_text(good.replace(head, head + "fault_injected_missing_column, "))
        self._broken = (catalog, good)

    def clear(self, run: Run) -> None:
        run.failing_dags.clear()
        if self._broken is not None:
            catalog, good = self._broken
            catalog.write_text(good)
            self._broken = None


class WorkerKilled(Fault):
    how = (
        "the task runs in a forked worker that the test SIGKILLs inside each of its store and "
        "warehouse write transactions (after the first write ran, before the commit), right "
        "after each Vault write returned, and at its end before it reports success"
    )
    sites = frozenset({Site.STORE_WRITE, Site.WAREHOUSE_WRITE, Site.VAULT_WRITE, Site.TASK_END})
    killed = True
    after = True

    def __init__(self, backend: str, sites: frozenset[Site] | None = None) -> None:
        self.column = f"Worker killed ({backend})"
        if sites is not None:
            self.sites = sites
            self.how = (
                "as on SQLite, inside each warehouse write transaction only: what the server "
                "does with a dead client's open transaction is the same for the store, whose "
                "transactions the Postgres store-down column cuts mid-way (backend "
                "terminated), and the rest does not depend on the database"
            )


# ---------------------------------------------------------------------------------------------
# Running a task: one attempt, with or without a fault


@dataclass
class Attempt:
    struck: Point | None
    error: str | None  # the exception class the task failed with ("killed" for SIGKILL)
    message: str = ""
    opened: bool = True  # the task got as far as opening its services


def attempt(
    run: Run, task: Task, fault: Fault | None = None, at: int = 0, part: int | None = None
) -> Attempt:
    """Run the task once as a worker would; the fault armed at its point number `at` (of
    `part` of the task, if given)."""

    def call(svc: Services, probe: Probe | None) -> None:
        run.probe, run.last_part = probe, part
        try:
            task.call(svc, run, task.dataset)
        finally:
            run.probe, run.last_part = None, None

    if fault is not None and fault.killed:
        outcome: ChildOutcome = run_killed(run.settings, fault.sites, at, call, part=part)
        if outcome.killed_at is not None:
            return Attempt(outcome.killed_at, "killed")
        return Attempt(None, outcome.error)
    struck: Point | None = None
    probe: Probe | None = None
    if fault is not None and not fault.sites:
        fault.before(run, task)
        struck = Point(Site.TASK_START, "before the task")
    elif fault is not None:
        probe = Probe(
            fault.sites, at, lambda p, c: fault.strike(run, p, c), after=fault.after, part=part
        )
    opened = False
    try:
        with run.services() as svc:
            opened = True
            if probe is None:
                call(svc, None)
            else:
                with probe.installed(svc):
                    call(svc, probe)
                    probe.task_end()
    except Exception as exc:
        return Attempt(probe.struck if probe else struck, type(exc).__name__, str(exc), opened)
    return Attempt(probe.struck if probe else struck, None)


def record_failure(run: Run, task: Task) -> None:
    """gdpr_erasure's on_failure_callback, once the task failed for good (fault still on).

    Skipped when an earlier failure left the request failed and this try did not move it:
    the callback would only sign one more `failed` record.
    """
    try:
        with open_store(run.settings.store_url, migrate=False) as store:
            if RequestBook(store).require(run.ref).status is RequestStatus.FAILED:
                return
    except ErasureError:
        pass  # the store is down: so is the callback, as it finds out
    try:
        with run.services() as svc:
            workflow.fail(svc, run.ref, f"run {run.run_id}: task {task.name} failed", run.run_id)
    except Exception:  # the DAG logs it and keeps the task's own failure
        pass


def false_claim(run: Run) -> str | None:
    """What the request claims that is not true, right after a fault (None: nothing).

    Completion is claimed by a `completed` record or a closed status; the claim is true only
    when verify passed and the identifier is destroyed (a worker killed after finishing
    `complete` has completed it).
    """
    with open_store(run.settings.store_url, migrate=False) as store:
        record = RequestBook(store).require(run.ref)
        signed = any(r.kind is RecordKind.COMPLETED for r in RecordLedger(store).show(run.ref))
        if not signed and record.status not in CLOSED_STATUSES:
            return None
        verified = ActionLog(store).get(run.ref, workflow.VERIFICATION, "verify")
        if not signed:
            return f"marked {record.status.value} without a completion record"
        if verified is None or verified.status is not ActionStatus.DONE:
            return "a completion record, not verified"
        if record.secrets_destroyed_at is None:
            return "a completion record while the identifier is still held"
    return None


# ---------------------------------------------------------------------------------------------
# The state a task leaves, compared with a run without faults


_MOMENTS = ("_at", "_since")  # when something happened: differs between any two runs
# A retried verify saves its re-plan again, under the next version: the count of re-plans
# kept says how often verify ran, not what it found.
_RUN_COUNTS = ("replan_version",)
# A tombstone a retry finds in place is recorded `new: false` ("there already: another
# request, or a retry", erasure.actions.tombstone): which try wrote it is not kept.
_TRY_DEPENDENT = ("new",)


def stable(value: Any, ref: str) -> Any:
    """Evidence without its timestamps and database-assigned ids, the request named `<ref>`.

    A ruling's id comes from a sequence: on Postgres an insert killed before its commit
    still uses up a number, so the ruling the retry records gets the next one.
    """
    if isinstance(value, dict):
        return {
            k: stable(v, ref)
            for k, v in value.items()
            if not k.endswith(_MOMENTS) and k not in (*_RUN_COUNTS, *_TRY_DEPENDENT, "id")
        }
    if isinstance(value, list):
        return [stable(v, ref) for v in value]
    if isinstance(value, str):  # a check's result text may name an instant
        return _INSTANT.sub("<instant>", value.replace(ref, "<ref>"))
    return value


_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")


def _row(row: sa.Row[Any]) -> str:
    # Sealed blobs differ between estates (random nonces): compared by size.
    return repr(tuple(f"<{len(v)} bytes>" if isinstance(v, bytes) else v for v in row))


def warehouse_digest(svc: Services) -> dict[str, str]:
    """Every table the catalog names: its rows, hashed (order-independent)."""
    digest = {}
    for ds in svc.catalog.datasets:
        if ds.connection is None:
            continue
        if ds.encryption == "per_subject":  # sealed under random nonces: differs per estate
            with svc.warehouse.connect(ds) as conn:
                count = conn.execute(sa.text(f"SELECT COUNT(*) FROM {ds.name}")).scalar_one()
            digest[ds.name] = f"{count} sealed rows"
            continue
        try:
            with svc.warehouse.connect(ds) as conn:
                rows = sorted(_row(r) for r in conn.execute(sa.text(f"SELECT * FROM {ds.name}")))
        except (sa.exc.DBAPIError, ErasureError):
            digest[ds.name] = "absent"
            continue
        digest[ds.name] = f"{len(rows)}:" + hashlib.sha256("\n".join(rows).encode()).hexdigest()
    return digest


def state(run: Run) -> dict[str, Any]:
    """Everything a task may change, as comparable values."""
    ref = run.ref
    with run.services() as svc:
        record = svc.requests.require(ref)
        pepper = svc.peppers.version(record.pepper_version)
        versions = svc.plans.versions(ref)
        return {
            "status": record.status.value,
            "identifier destroyed": record.secrets_destroyed_at is not None,
            "request key in Vault": svc.keystore.exists(
                svc.secrets.key_hash(ref, record.pepper_version)
            ),
            "subject key in Vault": svc.keystore.exists(
                subject_hash(pepper, "customer_id", normalise("strip", SUBJECT_ID))
            ),
            "plan": [(i.action.value, i.dataset.name) for i in svc.plans.get(ref, 1).items]
            if 1 in versions
            else None,
            "actions": {
                f"{a.action} {a.dataset.name}": (a.status.value, stable(a.evidence, ref))
                for a in svc.action_log.list(ref)
            },
            "records": [
                (r.kind.value, stable(r.body.get("dataset"), ref))
                for r in svc.ledger.show(ref)
                if r.kind is not RecordKind.FAILED  # the failure callback's: one per fault
            ],
            "rulings": sorted(
                (r.dataset.name, r.option.value) for r in svc.rulings.for_request(ref)
            ),
            "tombstones": svc.suppression.count(),
            "warehouse": warehouse_digest(svc),
        }


def differences(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """What differs from the run without faults. A task that failed after finishing its work
    (killed before reporting success) leaves the request marked failed by the failure
    callback until the next step moves it on: failed stands for any open status."""
    found = []
    if got["status"] == "failed" and want["status"] not in {s.value for s in CLOSED_STATUSES}:
        got = {**got, "status": want["status"]}
    for key in want:
        if key in ("actions", "warehouse"):
            for name in sorted(set(got[key]) | set(want[key])):
                if got[key].get(name) != want[key].get(name):
                    found.append(f"{key}[{name}]: {got[key].get(name)} != {want[key].get(name)}")
        elif got[key] != want[key]:
            found.append(f"{key}: {got[key]} != {want[key]}")
    return found


# ---------------------------------------------------------------------------------------------
# One cell of the matrix, and the runs that fill them


@dataclass
class Cell:
    applies: bool = True
    errors: list[str] = field(default_factory=list)  # one per try the fault struck
    absorbed: int = 0  # tries the fault struck that still succeeded
    got_through: bool = False  # the last try of the walk ran the whole task to its end
    dag_runs: int = 0  # rematerialisation DAG runs the task's tries triggered
    problems: list[str] = field(default_factory=list)

    def text(self) -> str:
        if not self.applies:
            return "—"
        if not self.errors and not self.absorbed:
            return "not used"
        parts = []
        if self.errors:
            kinds = ", ".join(dict.fromkeys(self.errors))
            times = f" x{len(self.errors)}" if len(self.errors) > 1 else ""
            parts.append(f"fails{times} ({kinds})")
        if self.absorbed:
            parts.append(f"absorbed x{self.absorbed}")
        verdict = "**WRONG: " + "; ".join(self.problems) + "**" if self.problems else "done"
        runs = f", DAG run x{self.dag_runs}" if self.dag_runs > 1 else ""
        return " · ".join(parts) + f" → {verdict}{runs}"


def inject(run: Run, task: Task, fault: Fault) -> Cell:
    """The fault at every point of the task in turn, one try each, until a try gets through
    (or once before the task, for a fault without points); every strike checked. A task that
    acts on several items has its points walked item by item."""
    if not fault.applies(task):
        return Cell(applies=False)
    cell = Cell()
    for part in range(task.parts) if task.parts and fault.sites else [None]:
        at = 1
        while strike_once(run, task, fault, at, part, cell):
            at += 1
    cell.got_through = bool(fault.sites) and not task.parts and not cell.problems
    return cell


def strike_once(run: Run, task: Task, fault: Fault, at: int, part: int | None, cell: Cell) -> bool:
    """One try with the fault at point `at`; whether it struck and failed the task."""
    tried = attempt(run, task, fault, at, part)
    if tried.struck is None:  # no point `at` in this try: it ran to its end
        if tried.error is not None:
            cell.problems.append(f"failed by itself ({tried.error}: {tried.message})")
        return False
    if tried.error is None:
        cell.absorbed += 1
    else:
        cell.errors.append(tried.error)
        if len(cell.errors) == 1:  # the rest of the walk resumes from where this try left it
            record_failure(run, task)
    fault.clear(run)
    if fault.stops_at_start and tried.opened:
        cell.problems.append("the task got past opening its services")
    if any(s.lower() in tried.message.lower() for s in NEVER_SHOWN):
        cell.problems.append(f"the {tried.error} message shows an identifier")
    claim = false_claim(run)
    if claim is not None:
        cell.problems.append(f"after {tried.struck.what!r}: {claim}")
    return bool(fault.sites) and tried.error is not None


def drive(
    run: Run, faults: list[Fault], reference: Reference | None = None
) -> tuple[Reference, dict[str, dict[str, Cell]]]:
    """Every task of the request with each fault in turn, then cleared; the state after each
    task compared with the reference's (without one, this run is the reference: its faults
    must stop each task before it starts)."""
    cells: dict[str, dict[str, Cell]] = {f.column: {} for f in faults}
    known: set[str] = set()  # differences already charged to an earlier task
    tasks = reference.tasks if reference is not None else [Task("plan", plan_task)]
    states: list[dict[str, Any]] = []
    index = 0
    while index < len(tasks):
        task = tasks[index]
        for fault in faults:
            triggered = dag_runs(run)
            cell = cells[fault.column][task.name] = inject(run, task, fault)
            cell.dag_runs = dag_runs(run) - triggered
            if cell.dag_runs > len(cell.errors) + cell.absorbed + 1:
                cell.problems.append(f"its DAG ran {cell.dag_runs} times: more than once a try")
        if not cells[faults[-1].column][task.name].got_through:
            cleared = attempt(run, task)  # what clearing the task does
            assert cleared.error is None, f"{run.name}: {task.name} cleared: {cleared.message}"
        if task.name == "plan":
            with run.services() as svc:
                run.escalations = [i.dataset for i in workflow.pending_escalations(svc, run.ref)]
                if reference is None:
                    tasks = [task, *tasks_of(svc, run.ref)[1:]]
        inside = [
            cells[f.column][task.name]
            for f in faults
            if not f.stops_at_start
            and (cells[f.column][task.name].errors or cells[f.column][task.name].absorbed)
        ]
        if reference is None:
            assert not inside, f"{run.name}: a reference run's fault reached {task.name}"
            states.append(state(run))
        elif inside:  # else nothing struck after the task began: it ran as in the reference
            wrong = [d for d in differences(state(run), reference.states[index]) if d not in known]
            known.update(wrong)
            for cell in inside:
                cell.problems += wrong  # the faults that struck inside this task did it
        index += 1
    return reference or Reference(tasks, states), cells


@dataclass(frozen=True)
class Reference:
    """The tasks of the request, and the state after each in a run without faults."""

    tasks: list[Task]
    states: list[dict[str, Any]]


# ---------------------------------------------------------------------------------------------
# Fixtures: our own OpenBao (it is killed here), estates on SQLite and Postgres


@pytest.fixture(scope="module")
def bao(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedOpenBao]:
    """An OpenBao of this module's own, on raft storage, so a SIGKILL loses nothing."""
    server = EmbeddedOpenBao(data_dir=tmp_path_factory.mktemp("faults-openbao")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def admin(postgres_url: str) -> Iterator[PostgresAdmin]:
    conn = PostgresAdmin(postgres_url)
    try:
        yield conn
    finally:
        conn.close()  # and drops the databases it created


@dataclass
class Estates:
    """The demo estate built once per backend; each run acts on a copy of it."""

    base: Path
    bao: EmbeddedOpenBao
    admin: PostgresAdmin
    server: str  # the Postgres server URL, without a database
    pristine: dict[str, Settings] = field(default_factory=dict)

    def run(self, name: str, backend: str) -> Run:
        """A copy of the estate, a fresh store, and the demo request registered on it."""
        source = self._pristine(backend)
        where = self.base / backend / name
        estate = where / "estate"
        shutil.copytree(Path(str(source.catalog_path)).parent, estate)
        settings = source.model_copy(
            update={
                "catalog_path": estate / "catalog.yaml",
                "crm_export": estate / CRM_EXPORT,
                "vault_anchor_path": anchor_path_for(where),  # a fresh store, a head of its own
            }
        )
        if backend == "SQLite":
            store = where / "store" / "erasure.db"
            settings = settings.model_copy(update={"store_url": f"sqlite:///{store}"})
            outage: SqliteStoreOutage | PostgresStoreOutage = SqliteStoreOutage(store)
        else:
            warehouse, store_db = (f"faults_{name}_{uuid.uuid4().hex[:8]}_{p}" for p in "ws")
            self.admin.create(warehouse, template=self._database(backend))
            self.admin.create(store_db)
            catalog = estate / "catalog.yaml"
            catalog.write_text(catalog.read_text().replace(self._database(backend), warehouse))
            settings = settings.model_copy(update={"store_url": f"{self.server}/{store_db}"})
            outage = PostgresStoreOutage(self.admin, store_db)
        # Not the lakehouse tables (every run plans the same tasks): the Worker killed columns
        # fork each task from this process, which ran delta-rs, and delta-rs refuses to run in
        # a process forked after its runtime started (tokio-rs/tokio#4301); and a worker killed
        # inside the write logging the Iceberg delete's staged files leaves them (manifests
        # keeping the subject's bounds) named by nothing, which verify rightly finds and a
        # retry cannot tell from a writer's in flight (the operator runbook says what to do).
        drop_lake(estate)
        run = Run(name, backend, settings, f"FAULTS-{name}", outage, self.bao, self.admin)
        run.triggers = where / "triggers"
        conf = {**CONF, "request_ref": run.ref, "notes": f"Wrote in; {NOTE_CANARY}"}
        with run.services() as svc:
            # The copy's archive was sealed under the subject's key: a run before shredded it.
            pepper = svc.peppers.current()
            key = subject_hash(pepper, "customer_id", normalise("strip", SUBJECT_ID))
            svc.keystore.create(key, ARCHIVE)
            register(svc, conf, run.run_id)  # as the desk submits it; outside the matrix
        return run

    def _pristine(self, backend: str) -> Settings:
        if backend not in self.pristine:
            url = None if backend == "SQLite" else f"{self.server}/{self._database(backend)}"
            if url is not None:
                self.admin.create(self._database(backend))
            self.pristine[backend] = open_demo(self.base / backend / "pristine", self.bao, url=url)
        return self.pristine[backend]

    def _database(self, backend: str) -> str:
        return f"faults_pristine_{id(self):x}_{backend.lower()}"


def completed_cleanly(run: Run) -> list[str]:
    """What is wrong with the finished request (nothing, we hope)."""
    problems = []
    with run.services() as svc:
        record = svc.requests.require(run.ref)
        if record.status not in CLOSED_STATUSES:
            problems.append(f"{run.name}: {record.status.value}, not complete")
        completed = [r for r in svc.ledger.show(run.ref) if r.kind is RecordKind.COMPLETED]
        if len(completed) != 1:
            problems.append(f"{run.name}: {len(completed)} completion records")
        if not svc.ledger.verify().ok:
            problems.append(f"{run.name}: the record chain does not verify")
        names = " ".join(svc.keystore.list_key_names()).lower()
        # Not inside a hash: the key names are hex, and "c0001" turns up in one now and then.
        if any(
            re.search(rf"(?<![0-9a-f]){re.escape(s.lower())}(?![0-9a-f])", names)
            for s in NEVER_SHOWN
        ):
            problems.append(f"{run.name}: a Vault key name shows an identifier")
        if run.backend == "SQLite":
            text = run.outage.path.read_bytes().decode("latin-1").lower()  # type: ignore[union-attr]
        else:
            text = store_text(svc)
        if any(s.lower() in text for s in (DEMO_SUBJECT[1], NOTE_CANARY)):
            problems.append(f"{run.name}: the erasure store still holds the identifier or notes")
    return problems


def store_text(svc: Services) -> str:
    """Every row of every table of a Postgres store, as text."""
    with svc.store.engine.connect() as conn:
        names = sa.inspect(conn).get_table_names()
        return "\n".join(
            str(row[0]).lower()
            for name in names
            for row in conn.execute(sa.text(f'SELECT t::text FROM "{name}" AS t'))
        )


# ---------------------------------------------------------------------------------------------
# The matrix, and the page it is published on


# The first run of each backend is the reference: its faults stop each task before it
# opens its services (checked), so the state after each task is that of a run without faults.
SQLITE_RUNS: list[list[Fault]] = [
    [VaultDownAtStart(), StoreDownAtStart("SQLite")],
    [RebuildFails(), VaultDownInside()],
    [WarehouseCut("SQLite")],
    [WorkerKilled("SQLite")],
]
POSTGRES_RUNS: list[list[Fault]] = [
    [StoreDownAtStart("Postgres")],
    [StoreDownInside("Postgres")],
    [WarehouseCut("Postgres")],
    [WorkerKilled("Postgres", frozenset({Site.WAREHOUSE_WRITE}))],
]
COLUMNS = [
    "Vault down at start",
    "Vault down inside",
    "Store down at start (SQLite)",
    "Store down at start (Postgres)",
    "Store down inside (Postgres)",
    "Warehouse cut (SQLite)",
    "Warehouse cut (Postgres)",
    "Rebuild fails",
    "Worker killed (SQLite)",
    "Worker killed (Postgres)",
]


@dataclass
class Matrix:
    tasks: list[str]
    cells: dict[str, dict[str, Cell]]
    faults: dict[str, Fault]
    problems: list[str]


@pytest.fixture(scope="module")
def matrix(
    tmp_path_factory: pytest.TempPathFactory,
    bao: EmbeddedOpenBao,
    admin: PostgresAdmin,
    postgres_url: str,
) -> Matrix:
    estates = Estates(
        tmp_path_factory.mktemp("faults"), bao, admin, postgres_url.rpartition("/")[0]
    )
    cells: dict[str, dict[str, Cell]] = {}
    faults: dict[str, Fault] = {}
    problems: list[str] = []
    tasks: list[Task] = []
    for backend, runs in (("SQLite", SQLITE_RUNS), ("Postgres", POSTGRES_RUNS)):
        reference = None
        for number, run_faults in enumerate(runs, 1):
            run = estates.run(f"{backend.lower()}-{number}", backend)
            reference, found = drive(run, run_faults, reference)
            cells.update(found)
            faults.update({f.column: f for f in run_faults})
            problems += completed_cleanly(run)
        assert reference is not None
        tasks = reference.tasks
    assert sorted(cells) == sorted(COLUMNS)
    return Matrix([t.name for t in tasks], cells, faults, problems)


def render(m: Matrix) -> str:
    """docs/reliability.md: the matrix, what each outcome means, and what to do."""
    head = "| task | " + " | ".join(COLUMNS) + " |"
    rule = "|" + "---|" * (len(COLUMNS) + 1)
    rows = [
        f"| `{task}` | " + " | ".join(m.cells[c][task].text() for c in COLUMNS) + " |"
        for task in m.tasks
    ]
    ways: dict[str, list[str]] = {}
    for column in COLUMNS:
        ways.setdefault(m.faults[column].how, []).append(column)
    how = "\n".join(f"- **{', '.join(columns)}**: {text}." for text, columns in ways.items())
    cells = [cell for column in m.cells.values() for cell in column.values()]
    struck = sum(len(cell.errors) + cell.absorbed for cell in cells)
    wrong = sum(bool(cell.problems) for cell in cells)
    summary = f"In all, {struck} faults struck the {len(m.tasks)} tasks. " + (
        f"**{wrong} cell(s) are WRONG** (see the matrix)."
        if wrong
        else "None left a false completion,\nand every cleared task ended in the state of the "
        "run without faults."
    )
    return PAGE.format(matrix="\n".join([head, rule, *rows]), how=how, summary=summary)


PAGE = """\
# Reliability: what a fault does to an erasure, and what to do

<!-- Generated by tests/integration/test_faults.py; do not edit by hand. Run
     `.venv/bin/pytest tests/integration/test_faults.py` and commit the result. -->

Every task of an erasure run (`gdpr_erasure`, one request on the demo estate) was run with
each fault below injected for real: OpenBao killed, the erasure store made unreachable, the
warehouse connection cut in the middle of a transaction, a rebuild failing, the worker
process SIGKILLed; on SQLite and on Postgres where the database's behaviour matters. After
every strike, with the fault removed, the request was checked: it is not complete, and no
completion record claims what is not true. Then the failed task was run again (what **Clear**
does), and once it succeeded the whole state was compared with a run without faults: the
same rows deleted, the same keys destroyed, the same tombstones, one signed record per
decision, one completion record, the same evidence in the action log, every warehouse table
identical. Registration is outside the matrix.

{summary}

## What an outcome means

- **fails (Error) → done**: the task failed with that error (the name in the task log);
  nothing was reported complete; clearing the task once the cause was fixed finished it,
  and the request ended exactly as without the fault.
- **fails xN**: the fault struck at N places of the task: the first place in the first try,
  the next place in the retry, and so on (item by item for `record_rulings`), until a try
  got through. Each failed try was cleared and resumed from what the tries before had done.
- **killed**: the worker process died (SIGKILL); Airflow fails the task once its heartbeat
  stops, and clearing it resumes like any other failure.
- **DAG run xN**: a rebuild's rematerialisation DAG ran N times, once per try that had not
  recorded its success; a rebuild re-creates the artefact from the cleaned sources, so
  running it again is safe.
- **not used**: the task never touches what failed; it succeeds as if nothing happened.
- **—**: the fault does not apply to this task.

## What to do when a task fails

1. Read the task log: the error names what failed (Vault, the erasure store, the warehouse,
   the rebuild) and never the person.
2. Fix that: restart Vault, bring the database back, fix the rebuild's DAG or SQL.
3. **Clear the failed task** in the Airflow grid (with its downstream tasks if they did not
   run). Airflow's retries already cover a short outage.

A cleared task does not act twice: what an earlier try finished is read back from the action
log; an erasure finds the rows gone and reports what the earlier try deleted; a destroyed key
stays destroyed and is still reported; a tombstone, a ruling or a signed record is not
written again. The request is reported complete only by `complete`, after `verify` passed,
and only once the request key holding the raw identifier is destroyed.

## How each fault was injected

{how}

## The matrix

{matrix}

## What this found (fixed)

- `complete` signed the completion record before destroying the request key: a fault between
  the two left a signed "completed" while the identifier was still held.
- A ruling retried after its `decided` record was signed signed it a second time.
- A retry that found the rows already deleted, the key already destroyed or the artefact
  already emptied recorded 0 rows, no key and no statement: the completion record lost the
  evidence of what the earlier try did.
- A connection cut under a table reflection or a record append surfaced as a raw driver
  error instead of `WarehouseError`/`StoreError`.
"""


def test_every_fault_at_every_task_clears_to_the_same_completed_request(matrix: Matrix) -> None:
    wrong = [
        f"{column} / {task}: {'; '.join(cell.problems)}"
        for column, cells in matrix.cells.items()
        for task, cell in cells.items()
        if cell.problems
    ]
    assert not wrong + matrix.problems, "\n".join(wrong + matrix.problems)
    struck = {
        c: sum(bool(cell.errors) for cell in cells.values()) for c, cells in matrix.cells.items()
    }
    assert all(struck.values()), f"a fault that never struck: {struck}"


def test_the_published_matrix_is_the_one_this_run_produced(matrix: Matrix) -> None:
    if publish(DOC, "faults", render(matrix)):
        pytest.fail(f"{DOC.relative_to(REPO)} was out of date: rewritten; review and commit it")
