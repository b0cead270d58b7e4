"""The DPO's desk: `GET /erasure/desk` (the page) and `GET /erasure/api/v1/desk` (the same, JSON).

Every request with its status, dates, deadline (overdue and due within 7 days marked),
extension, the prompts awaiting the DPO with a link straight to each in Airflow's UI, the
remedy that works where one is needed (`erasure.desk` decides which: clear a failed task or
an ended run in Airflow, start a deleted run again, submit a corrected request), and the
submissions not registered yet or refused at register, and the restore replays on record
(`erasure.replay`: a restored table's erased subjects erased again). `erasure.desk` builds it
from the registry, the sealed submissions still kept and the facts read here from Airflow's metadata
DB (the API server may use the ORM). Entries are keyed by request reference and subject
hash, never the identifier.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import quote

import sqlalchemy as sa
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse
from pydantic import BaseModel

from erasure.audit.records import RecordKind
from erasure.deadlines import Deadline
from erasure.desk import (
    Desk,
    DeskEntry,
    DeskStatus,
    FailedTask,
    PendingPrompt,
    Remedy,
    RemedyKind,
    ReplayOnDesk,
    RunFacts,
)
from erasure.desk import build_desk as build
from erasure.intake import sealed_refs
from erasure.model import REQUEST_REF
from erasure.registry.interventions import InterventionBook
from erasure_airflow.api.auth import Access, DeskDep, backend_of, dpo_roles_of, may
from erasure_airflow.api.backend import ErasureBackend
from erasure_airflow.api.desk import ERASURE_DAG_ID
from erasure_airflow.api.rendering import render

api = APIRouter(prefix="/api/v1")
pages = APIRouter()
BackendDep = Annotated[ErasureBackend, Depends(backend_of)]


# ---------------------------------------------------------------------------------------------
# Documents: the desk with the links a person or a script follows


class PromptView(PendingPrompt):
    url: str  # the prompt in Airflow's UI, answered there


class FailedTaskView(FailedTask):
    url: str  # the task instance in Airflow's UI: its log, and Clear


class RemedyView(Remedy):
    # clear_run: the run in Airflow's UI; resume: POST it; resubmit, new_request: the form.
    # clear_tasks: each failed task's url. None: nothing to follow.
    url: str | None


class EntryView(DeskEntry):
    prompts: Sequence[PromptView]
    failed: Sequence[FailedTaskView]
    remedy: RemedyView
    run_url: str | None
    request_url: str | None  # the request's JSON: plan, actions (registered only)
    evidence_url: str | None  # its evidence pack (registered only)


class ReplayView(ReplayOnDesk):
    evidence_url: str  # the replay's evidence pack: its signed record, the citations


class DeskView(BaseModel):
    generated_at: datetime
    today: str
    due_soon_days: int
    status: DeskStatus | None
    counts: dict[str, int]
    entries: list[EntryView]
    replays: list[ReplayView] = []


@api.get("/desk")
async def desk_json(
    request: Request, caller: DeskDep, backend: BackendDep, status: DeskStatus | None = None
) -> DeskView:
    """Every request, as the desk page shows it; `status` filters the entries."""
    return await run_in_threadpool(_desk_view, backend, _base(request), status)


@pages.get("/desk", response_class=HTMLResponse)
async def desk_page(
    request: Request,
    caller: DeskDep,
    user: GetUserDep,
    backend: BackendDep,
    status: DeskStatus | None = None,
) -> HTMLResponse:
    """The desk for people: counts, a status filter, one row per request."""
    view = await run_in_threadpool(_desk_view, backend, _base(request), status)
    can_submit = may(user, Access.SUBMIT, dpo_roles=dpo_roles_of(request))
    return HTMLResponse(render_desk_page(view, can_submit=can_submit))


def _base(request: Request) -> str:
    """Airflow's root path (the UI's links), from this app's mount point `<root>/erasure`."""
    root = str(request.scope.get("root_path") or "")
    return root[: -len("/erasure")] if root.endswith("/erasure") else ""


def _desk_view(backend: ErasureBackend, base: str, status: DeskStatus | None) -> DeskView:
    desk = build(
        backend.requests().list(),
        erasure_runs(),
        datetime.now(UTC).date(),
        sealed=sealed_refs(backend.store()),
        interventions=InterventionBook(backend.store()).list(),
        status=status,
        replays=backend.ledger().list(kind=RecordKind.REPLAYED),
    )
    return view_of(desk, base)


def view_of(desk: Desk, base: str) -> DeskView:
    """The desk with its links: Airflow UI paths under `base`, the erasure API's own."""
    return DeskView(
        generated_at=datetime.now(UTC),
        today=desk.today.isoformat(),
        due_soon_days=desk.due_soon_days,
        status=desk.status,
        counts=desk.counts.model_dump(),
        entries=[_entry_view(e, base) for e in desk.entries],
        replays=[
            ReplayView(
                **r.model_dump(),
                evidence_url=(
                    f"{base}/erasure/api/v1/records/{quote(r.replay_ref, safe='')}/export"
                    "?format=html"
                ),
            )
            for r in desk.replays
        ],
    )


def _entry_view(entry: DeskEntry, base: str) -> EntryView:
    exists = entry.run_id is not None and entry.run_state is not None  # not deleted
    run = f"{base}/dags/{ERASURE_DAG_ID}/runs/{quote(entry.run_id or '')}" if exists else None
    ref = quote(entry.request_ref, safe="")
    registered = entry.subject_hash is not None
    remedy = {
        RemedyKind.CLEAR_RUN: run,
        RemedyKind.RESUME: f"{base}/erasure/api/v1/requests/{ref}/resume",
        RemedyKind.RESUBMIT: f"{base}/erasure/requests/new?ref={ref}",
        RemedyKind.NEW_REQUEST: f"{base}/erasure/requests/new",
    }.get(entry.remedy.kind)
    return EntryView(
        **entry.model_dump(exclude={"prompts", "failed", "remedy"}),
        prompts=[
            PromptView(
                **p.model_dump(),
                url=f"{run}/{_task_path(p.task_id, p.map_index)}/required_actions",
            )
            for p in entry.prompts
        ],
        failed=[
            FailedTaskView(**f.model_dump(), url=f"{run}/{_task_path(f.task_id, f.map_index)}")
            for f in entry.failed
        ],
        remedy=RemedyView(**entry.remedy.model_dump(), url=remedy),
        run_url=run,
        request_url=f"{base}/erasure/api/v1/requests/{ref}" if registered else None,
        evidence_url=(
            f"{base}/erasure/api/v1/records/{ref}/export?format=html" if registered else None
        ),
    )


def _task_path(task_id: str, map_index: int) -> str:
    path = f"tasks/{quote(task_id)}"
    return f"{path}/mapped/{map_index}" if map_index >= 0 else path


# ---------------------------------------------------------------------------------------------
# What Airflow knows of the erasure runs


def erasure_runs() -> list[RunFacts]:
    """Every desk-started gdpr_erasure run: state, prompts waiting, tasks failed for good."""
    from airflow.models.dagrun import DagRun
    from airflow.models.hitl import HITLDetail
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    ti = TaskInstance
    waiting = (TaskInstanceState.AWAITING_INPUT.value, TaskInstanceState.DEFERRED.value)
    with create_session() as session:
        runs = session.execute(
            sa.select(DagRun.run_id, DagRun.state, DagRun.conf, DagRun.queued_at).where(
                DagRun.dag_id == ERASURE_DAG_ID
            )
        ).all()
        tasks = session.execute(
            sa.select(  # type: ignore[call-overload]  # rendered_map_index: a hybrid property
                ti.run_id,
                ti.task_id,
                ti.map_index,
                ti.state,
                ti.try_number,
                ti.end_date,
                ti.rendered_map_index,
                HITLDetail.subject,
                HITLDetail.created_at,
                HITLDetail.assignees,
            )
            .outerjoin(HITLDetail, HITLDetail.ti_id == ti.id)
            .where(
                ti.dag_id == ERASURE_DAG_ID,
                sa.or_(
                    ti.state == TaskInstanceState.FAILED.value,
                    sa.and_(
                        ti.state.in_(waiting),
                        HITLDetail.ti_id.is_not(None),
                        HITLDetail.responded_at.is_(None),
                    ),
                ),
            )
            .order_by(ti.run_id, ti.task_id, ti.map_index)
        ).all()
    facts: dict[str, RunFacts] = {}
    for run_id, state, conf, queued_at in runs:
        ref = _ref_of(run_id, conf)
        if ref is not None:
            facts[run_id] = RunFacts(
                run_id=run_id, request_ref=ref, state=str(state), queued_at=queued_at
            )
    for row in tasks:
        run = facts.get(row.run_id)
        if run is None:
            continue
        if row.state == TaskInstanceState.FAILED.value:
            run.failed.append(
                FailedTask(
                    task_id=row.task_id,
                    map_index=row.map_index,
                    label=row.rendered_map_index,
                    try_number=row.try_number,
                    ended_at=row.end_date,
                )
            )
        else:
            run.prompts.append(
                PendingPrompt(
                    task_id=row.task_id,
                    map_index=row.map_index,
                    subject=row.subject,
                    waiting_since=row.created_at,
                    assigned_to=[str(a.get("name")) for a in row.assignees or []],
                )
            )
    return list(facts.values())


def _ref_of(run_id: str, conf: object) -> str | None:
    """The request reference of a run the desk started (`erasure-<ref>[-n]`, its conf
    agreeing); None for any other run, whose id and conf the desk does not show."""
    ref = conf.get("request_ref") if isinstance(conf, dict) else None
    if not isinstance(ref, str) or not REQUEST_REF.match(ref):
        return None
    if run_id == f"erasure-{ref}" or re.fullmatch(rf"erasure-{re.escape(ref)}-\d+", run_id):
        return ref
    return None


# ---------------------------------------------------------------------------------------------
# The page


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


STATUS_LABELS = {
    DeskStatus.SUBMITTED: "submitted",
    DeskStatus.REFUSED: "refused at register",
    DeskStatus.REGISTERED: "registered",
    DeskStatus.PLANNED: "planned",
    DeskStatus.ACTING: "acting",
    DeskStatus.AWAITING_DPO: "awaiting DPO",
    DeskStatus.VERIFYING: "verifying",
    DeskStatus.COMPLETE: "complete",
    DeskStatus.COMPLETE_WITH_EXEMPTIONS: "complete with exemptions",
    DeskStatus.FAILED: "failed",
    DeskStatus.RUN_ENDED: "run ended without completing the request",
}


def render_desk_page(view: DeskView, *, can_submit: bool) -> str:
    """The desk as one self-contained page (every value escaped)."""
    counts = view.counts
    cards = "".join(
        f'<div class="card {cls}"><span class="n">{counts[key]}</span>{_e(label)}</div>'
        for key, label, cls in (
            ("open", "open", ""),
            ("prompts", "prompts awaiting you", _warn(counts["prompts"])),
            ("overdue", "overdue", "bad" if counts["overdue"] else ""),
            ("due_soon", f"due within {view.due_soon_days} days", _warn(counts["due_soon"])),
            ("failed", "need a remedy", "bad" if counts["failed"] else ""),
            ("dry_runs", "dry runs", ""),
            ("closed", "complete", ""),
        )
    )
    options = '<option value="">every status</option>' + "".join(
        f'<option value="{_e(s.value)}"{" selected" if view.status is s else ""}>'
        f"{_e(STATUS_LABELS[s])}</option>"
        for s in DeskStatus
    )
    new = (
        '<a class="button" id="new-request" href="requests/new">New erasure request</a>'
        if can_submit
        else ""
    )
    shown = f" ({len(view.entries)} {_e(STATUS_LABELS[view.status])})" if view.status else ""
    none = "No requests with this status." if view.status else "No requests yet."
    rows = "".join(_row(e, can_submit=can_submit) for e in view.entries) or (
        f'<tr><td colspan="9" class="empty">{none}</td></tr>'
    )
    return render(
        "desk.html",
        new=new,
        cards=cards,
        options=options,
        shown=shown,
        rows=rows,
        replays=_replays(view.replays),
        generated=_e(view.generated_at.strftime("%Y-%m-%d %H:%M:%S UTC")),
        today=_e(view.today),
    )


def _replays(replays: Sequence[ReplayView]) -> str:
    """The restore replays on record: when, which table, rows erased again, for whom."""
    if not replays:
        return '<p class="sub" id="no-replays">No restore replays on record.</p>'
    rows = "".join(
        f'<tr data-replay="{_e(r.replay_ref)}"><td class="date">'
        f"{_e(r.replayed_at.strftime('%Y-%m-%d %H:%M UTC'))}</td>"
        f"<td><code>{_e(r.dataset.qualified if r.dataset else '?')}</code></td>"
        f"<td>{r.rows_erased}</td>"
        f"<td>{_e(', '.join(ref or '(no request)' for ref in r.cited) or '—')}</td>"
        f'<td><span class="status {"ok" if r.verified else "bad"}">'
        f"{'verified' if r.verified else 'NOT verified'}</span></td>"
        f'<td class="ref"><a href="{_e(r.evidence_url)}">{_e(r.replay_ref)}</a>'
        f'<div class="sub">record seq {r.record_seq}</div></td></tr>'
        for r in replays
    )
    head = (
        "<tr><th>When</th><th>Restored table</th><th>Rows erased again</th>"
        "<th>Cited requests</th><th>Second read</th><th>Replay · evidence</th></tr>"
    )
    return f'<table id="replays"><thead>{head}</thead><tbody>{rows}</tbody></table>'


def _warn(count: int) -> str:
    return "warn" if count else ""


def _by_hand(e: EntryView) -> str:
    """What a person set by hand on the run, and who: it completed nothing, ruled nothing."""
    if not e.interventions:
        return ""
    lines = "".join(f"<li>{_e(i.describe())}</li>" for i in e.interventions)
    return f'<div class="sub">Set by hand in Airflow (completes nothing):<ul>{lines}</ul></div>'


def _row(e: EntryView, *, can_submit: bool) -> str:
    status = e.status
    status_class = {
        DeskStatus.FAILED: "bad",
        DeskStatus.REFUSED: "bad",
        DeskStatus.RUN_ENDED: "bad",
        DeskStatus.AWAITING_DPO: "warn",
        DeskStatus.COMPLETE: "ok",
        DeskStatus.COMPLETE_WITH_EXEMPTIONS: "ok",
    }.get(status, "")
    tags = '<span class="tag">dry run</span>' if e.dry_run else ""
    ref = f"<strong>{_e(e.request_ref)}</strong>{tags}"
    if e.request_url:
        ref = f'<a href="{_e(e.request_url)}">{ref}</a>'
    subject = (
        f'<code title="{_e(e.subject_hash)}">{_e(e.subject_hash[:12])}…</code>'
        f'<div class="sub">{_e(e.identifier_type)}</div>'
        if e.subject_hash
        else '<span class="sub">not registered</span>'
    )
    due = _e(e.effective_due_on or "—")
    if e.extended_until and e.due_on:
        due += f'<div class="sub">was {_e(e.due_on)}</div>'
    extended = (
        f'<span class="tag">until {_e(e.extended_until)}</span>'
        f'<div class="sub">{_e(e.extension_reason or "")}</div>'
        if e.extended_until
        else ""
    )
    prompts = "".join(
        f'<a class="prompt" href="{_e(p.url)}">{_e(p.subject.removeprefix("Erasure: "))}</a>'
        for p in e.prompts
    )
    evidence = f'<a href="{_e(e.evidence_url)}">evidence</a>' if e.evidence_url else ""
    run = f'<a href="{_e(e.run_url)}">{_e(e.run_state or "run")}</a>' if e.run_url else ""
    return (
        f'<tr data-ref="{_e(e.request_ref)}" data-status="{_e(status.value)}">'
        f'<td class="ref">{ref}</td><td>{subject}</td>'
        f'<td><span class="status {status_class}">{_e(_status_label(e))}</span></td>'
        f'<td class="date">{_e(e.received_on or "—")}</td><td class="date">{due}</td>'
        f"<td>{_days_left(e)}</td><td>{extended}</td>"
        f"<td>{prompts}{_remedy(e, can_submit=can_submit)}{_by_hand(e)}</td>"
        f"<td>{' · '.join(filter(None, (run, evidence)))}</td></tr>"
    )


def _status_label(e: EntryView) -> str:
    if e.status is not DeskStatus.RUN_ENDED:
        return STATUS_LABELS[e.status]
    if e.run_state is None:
        return "run deleted without completing the request"
    return f"run ended {e.run_state} without completing the request"


def _remedy(e: EntryView, *, can_submit: bool) -> str:
    """The remedy that works, and why that one."""
    if e.remedy.kind is RemedyKind.NONE:
        return ""
    why = f'<div class="sub">{_e(e.remedy.reason)}</div>'
    return f'<div class="remedy">{why}{_remedy_action(e, can_submit=can_submit)}</div>'


def _remedy_action(e: EntryView, *, can_submit: bool) -> str:
    kind, url = e.remedy.kind, _e(e.remedy.url or "")
    if kind is RemedyKind.CLEAR_TASKS:
        return "".join(
            f'<a class="failed" href="{_e(f.url)}">clear {_e(f.label or f.task_id)} '
            f"(failed, try {f.try_number})</a>"
            for f in e.failed
        )
    if kind is RemedyKind.CLEAR_RUN:
        return f'<a class="failed" href="{url}">clear the run</a>'
    if kind is RemedyKind.AWAIT_RECONCILE:
        return ""
    if not can_submit:  # the form and the resume route are the DPO's
        return '<div class="sub">(the DPO does this here)</div>'
    if kind is RemedyKind.RESUME:
        return f'<button class="resume" data-url="{url}">start its run again</button>'
    logs = "".join(  # a refusal is explained in the failed task's log, without the value
        f'<a href="{_e(f.url)}">why: the {_e(f.task_id)} log</a>' for f in e.failed
    )
    action = "submit a corrected request" if kind is RemedyKind.RESUBMIT else "submit a new request"
    return f'{logs}<a class="act" href="{url}">{action}</a>'


def _days_left(e: EntryView) -> str:
    if e.days_left is None:
        return '<span class="sub">—</span>'
    if e.deadline is Deadline.OVERDUE:
        return f'<span class="days bad">overdue {-e.days_left} d</span>'
    if e.deadline is Deadline.DUE_SOON:
        return f'<span class="days warn">{e.days_left} d</span>'
    return f'<span class="days">{e.days_left} d</span>'
