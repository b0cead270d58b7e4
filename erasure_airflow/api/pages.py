"""`/erasure/records`: the auditor's page, server-rendered, one self-contained HTML file.

The chain verification comes first, then a filter form (status, the day of a request's last
record, reference), one row per request (its status on record, effective erasure date,
earlier failures, links to its evidence pack), then the shown requests' records in chain
order. A request's status is `erasure.audit.outcome`'s, as the JSON API gives it. Subjects
appear only as keyed hashes; every value is escaped. Opened from the Airflow UI ("Browse >
Erasure records"), it is authenticated by the UI's `_token` cookie.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse

from erasure.audit.chain import ChainReport
from erasure.audit.outcome import (
    FailureOnRecord,
    FilterError,
    OutcomeStatus,
    RequestFilter,
    RequestOnRecord,
    requests_on_record,
)
from erasure.audit.records import CompletionRecord
from erasure_airflow.api.auth import ReaderDep, backend_of
from erasure_airflow.api.backend import ErasureBackend, Unavailable
from erasure_airflow.api.rendering import render
from erasure_airflow.api.routes import verify_chain

router = APIRouter()

_STATUS_LABELS = {
    OutcomeStatus.COMPLETE: "complete",
    OutcomeStatus.COMPLETE_WITH_EXEMPTIONS: "complete with exemptions",
    OutcomeStatus.FAILED: "failed",
    OutcomeStatus.IN_PROGRESS: "in progress",
    OutcomeStatus.DRY_RUN: "dry run (nothing erased)",
    OutcomeStatus.REPLAYED: "restore replay (erased again; cites the requests)",
}
_STATUS_CLASS = {
    OutcomeStatus.COMPLETE: "done",
    OutcomeStatus.COMPLETE_WITH_EXEMPTIONS: "done",
    OutcomeStatus.FAILED: "failed",
    OutcomeStatus.IN_PROGRESS: "open",
    OutcomeStatus.DRY_RUN: "dry",
    OutcomeStatus.REPLAYED: "done",
}


@router.get("/records", response_class=HTMLResponse)
def records_page(
    caller: ReaderDep,
    backend: Annotated[ErasureBackend, Depends(backend_of)],
    status: str | None = None,
    since: str | None = None,
    until: str | None = None,
    ref: str | None = None,
) -> HTMLResponse:
    """Completion records for people: verification, the requests asked for, their records."""
    try:
        wanted = RequestFilter.parse(status=status, since=since, until=until, ref=ref)
    except FilterError as exc:
        return HTMLResponse(
            render_filter_refused(str(exc)), status_code=HTTPStatus.UNPROCESSABLE_ENTITY
        )
    registry = {r.request_ref: r for r in backend.requests().list()}
    requests = requests_on_record(backend.ledger().list(), registry)
    try:
        report: ChainReport | str = verify_chain(backend)
    except Unavailable as exc:
        report = str(exc)  # the page still lists the records; it says why it could not verify
    return HTMLResponse(
        render_records_page(
            [r for r in requests if wanted.matches(r)], report, datetime.now(UTC), wanted
        )
    )


def render_records_page(
    requests: list[RequestOnRecord],
    report: ChainReport | str,
    generated: datetime,
    wanted: RequestFilter,
) -> str:
    """The page: `report` is the chain report, or why there is none; `wanted` the filter the
    requests were chosen by (shown in the form)."""
    records = sorted((r for req in requests for r in req.records), key=lambda r: r.seq)
    return _page(
        _verification(report),
        _filter_form(wanted),
        f"<h2>Requests ({len(requests)})</h2>",
        _requests_table(requests, filtered=wanted != RequestFilter()),
        f"<h2>Records in chain order ({len(records)})</h2>",
        _records_table(records),
        '<p class="note">Subjects appear only as keyed hashes (HMAC-SHA256 with a pepper held '
        "in Vault); no record holds a raw identifier. Each evidence pack carries the public "
        "keys and the chain segment needed to check it offline. Generated "
        f"{_e(generated.strftime('%Y-%m-%d %H:%M:%S UTC'))}.</p>",
    )


def render_filter_refused(problem: str) -> str:
    """The page for a filter that cannot be applied: what is wrong, never the value typed (it
    may be a subject's identifier put in the wrong box), and an empty form."""
    return _page(
        f'<div class="verify bad" id="refused"><strong>Filter not applied</strong>: '
        f"{_e(problem)}. What was typed is not shown back.</div>",
        _filter_form(RequestFilter()),
    )


def _page(*body: str) -> str:
    return render("records.html", body="\n".join(body))


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _words(value: str) -> str:
    return value.replace("_", " ")  # complete_with_exemptions -> complete with exemptions


def _verification(report: ChainReport | str) -> str:
    if isinstance(report, str):
        return (
            f'<div class="verify unknown"><strong>Chain not verified</strong>: {_e(report)}</div>'
        )
    if report.ok:
        versions = ", ".join(map(str, report.key_versions)) or "-"
        return (
            '<div class="verify ok"><strong>Chain verified</strong>: '
            f"{report.records} record(s); every hash, link and signature checks out. Head: "
            f"seq {report.head_seq}, <code>sha256:{_e(report.head_hash)}</code>; "
            f"signing key version(s) {_e(versions)}. Checked "
            f"{_e(report.verified_at.strftime('%Y-%m-%d %H:%M:%S UTC'))}.</div>"
        )
    problems = "".join(f"<li>{_e(p.describe())}</li>" for p in report.problems)
    more = " (list truncated)" if report.problems_truncated else ""
    return (
        '<div class="verify bad"><strong>Chain BROKEN</strong>: '
        f"{len(report.problems)} problem(s){more}; the first bad record is named first."
        f"<ul>{problems}</ul></div>"
    )


def _export_link(ref: str, fmt: str) -> str:
    # Relative to /erasure/records, so it works under any API root path.
    return f"api/v1/records/{quote(ref, safe='')}/export?format={fmt}"


def _filter_form(wanted: RequestFilter) -> str:
    options = "".join(
        f'<option value="{_e(s.value)}"{" selected" if wanted.status is s else ""}>'
        f"{_e(label)}</option>"
        for s, label in _STATUS_LABELS.items()
    )
    since = wanted.since.isoformat() if wanted.since else ""
    until = wanted.until.isoformat() if wanted.until else ""
    # Relative to /erasure/records, so it works under any API root path.
    return (
        '<form class="filters" method="get" action="records">'
        f'<label>Status <select name="status"><option value="">any</option>{options}</select>'
        "</label>"
        f'<label>Last record from <input type="date" name="since" value="{_e(since)}"></label>'
        f'<label>to <input type="date" name="until" value="{_e(until)}"></label>'
        '<label>Reference <input type="text" name="ref" size="24" '
        f'value="{_e(wanted.ref or "")}" placeholder="REQ-2026-0042 or REQ-2026-*"></label>'
        '<button type="submit">Filter</button> <a href="records">All requests</a></form>'
    )


def _requests_table(requests: list[RequestOnRecord], *, filtered: bool) -> str:
    if not requests:
        empty = "No request matches this filter" if filtered else "No completion records yet"
        return f"<p>{empty}.</p>"
    head = (
        "<tr><th>Request</th><th>Subject (keyed hash)</th><th>Status</th>"
        "<th>Effective erasure date</th><th>Records</th><th>Last record (UTC)</th>"
        "<th>Evidence</th></tr>"
    )
    rows = []
    for req in requests:
        effective = req.outcome.effective_erasure_date
        rows.append(
            f'<tr data-ref="{_e(req.request_ref)}" data-status="{_e(req.outcome.status.value)}">'
            f"<td><strong>{_e(req.request_ref)}</strong></td>"
            f'<td><code title="{_e(req.subject_hash)}">{_e(req.subject_hash[:16])}…</code></td>'
            f"<td>{_status(req)}</td>"
            f"<td>{_e(effective.isoformat() if effective else '')}</td><td>{len(req.records)}</td>"
            f"<td>{_e(_minute(req.last_record.created_at))}</td>"
            f'<td><a href="{_e(_export_link(req.request_ref, "html"))}" target="_blank" '
            f'rel="noopener">evidence page</a> · <a href="'
            f'{_e(_export_link(req.request_ref, "json"))}" target="_blank" rel="noopener">'
            "JSON pack</a></td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def _status(req: RequestOnRecord) -> str:
    """The status, what it stands on, and the failures the request was resumed from."""
    outcome = req.outcome
    label = _STATUS_LABELS[outcome.status]
    if outcome.status is OutcomeStatus.IN_PROGRESS:
        dry = "dry run; " if req.dry_run else ""
        label += f" ({dry}last record: {req.last_record.kind.value})"
    cell = f'<span class="status {_STATUS_CLASS[outcome.status]}">{_e(label)}</span>'
    if outcome.failure is not None:
        cell += f" · {_e(_failure(outcome.failure))}"
    earlier = outcome.earlier_failures
    if earlier:
        count = f"{len(earlier)} earlier failure{'s' if len(earlier) > 1 else ''}"
        cell += (
            f' <span class="earlier">· {count}: '
            f"{_e('; '.join(_failure(f) for f in earlier))}</span>"
        )
    return cell


def _failure(failure: FailureOnRecord) -> str:
    return f"{_minute(failure.failed_at)}, {failure.reason or 'no reason recorded'}"


def _minute(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M")


def _records_table(records: list[CompletionRecord]) -> str:
    if not records:
        return "<p>None.</p>"
    head = (
        "<tr><th>Seq</th><th>Created (UTC)</th><th>Request</th><th>Kind</th><th>Status</th>"
        "<th>Record hash</th><th>Key</th></tr>"
    )
    rows = "".join(
        f"<tr><td>{r.seq}</td><td>{_e(r.created_at.strftime('%Y-%m-%d %H:%M:%S'))}</td>"
        f"<td>{_e(r.request_ref)}</td><td>{_e(r.kind.value)}</td>"
        f"<td>{_e(_words(r.status.value) if r.status else '')}</td>"
        f'<td><code title="{_e(r.record_hash)}">{_e(r.record_hash[:16])}…</code></td>'
        f"<td>v{r.signing_key_version}</td></tr>"
        for r in records
    )
    return f"<table>{head}{rows}</table>"
