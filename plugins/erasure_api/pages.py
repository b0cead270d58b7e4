"""`/erasure/records`: the auditor's page, server-rendered, one self-contained HTML file.

The chain verification comes first, then one row per request (status, effective erasure
date, links to its evidence pack), then every record in chain order. Subjects appear only
as keyed hashes; every value is escaped. Opened from the Airflow UI ("Browse > Erasure
records"), it is authenticated by the UI's `_token` cookie.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse

from erasure.audit.chain import ChainReport
from erasure.audit.records import CompletionRecord, RecordKind, RecordStatus
from erasure_api.auth import ReaderDep, backend_of
from erasure_api.backend import ErasureBackend, Unavailable
from erasure_api.routes import verify_chain

router = APIRouter()


@router.get("/records", response_class=HTMLResponse)
def records_page(
    caller: ReaderDep,
    backend: Annotated[ErasureBackend, Depends(backend_of)],
    since: date | None = None,
    status: RecordStatus | None = None,
) -> HTMLResponse:
    """Completion records for people: verification, requests, the chain."""
    records = backend.ledger().list(since=since, status=status)
    try:
        report: ChainReport | str = verify_chain(backend)
    except Unavailable as exc:
        report = str(exc)  # the page still lists the records; it says why it could not verify
    return HTMLResponse(render_records_page(records, report, datetime.now(UTC)))


@dataclass
class _Request:
    ref: str
    subject_hash: str
    records: list[CompletionRecord] = field(default_factory=list)

    @property
    def outcome(self) -> CompletionRecord | None:
        return next(
            (r for r in self.records if r.kind in (RecordKind.COMPLETED, RecordKind.FAILED)),
            None,
        )

    @property
    def status(self) -> str:
        outcome = self.outcome
        if outcome is not None and outcome.status is not None:
            return outcome.status.value
        return f"in progress (last: {self.records[-1].kind.value})"

    @property
    def effective_date(self) -> str:
        outcome = self.outcome
        value = outcome.body.get("effective_erasure_date") if outcome is not None else None
        return str(value) if value else ""


def render_records_page(
    records: list[CompletionRecord], report: ChainReport | str, generated: datetime
) -> str:
    """The page: `report` is the chain report, or why there is none."""
    requests: dict[str, _Request] = {}
    for record in records:
        requests.setdefault(
            record.request_ref, _Request(record.request_ref, record.subject_hash)
        ).records.append(record)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Erasure records</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Erasure completion records</h1>",
        _verification(report),
        f"<h2>Requests ({len(requests)})</h2>",
        _requests_table(list(requests.values())),
        f"<h2>Records in chain order ({len(records)})</h2>",
        _records_table(records),
        '<p class="note">Subjects appear only as keyed hashes (HMAC-SHA256 with a pepper held '
        "in Vault); no record holds a raw identifier. Each evidence pack carries the public "
        "keys and the chain segment needed to check it offline. Generated "
        f"{_e(generated.strftime('%Y-%m-%d %H:%M:%S UTC'))}.</p>",
        "</body></html>",
    ]
    return "\n".join(parts)


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


def _requests_table(requests: list[_Request]) -> str:
    if not requests:
        return "<p>No completion records yet.</p>"
    head = (
        "<tr><th>Request</th><th>Subject (keyed hash)</th><th>Status</th>"
        "<th>Effective erasure date</th><th>Records</th><th>Last record (UTC)</th>"
        "<th>Evidence</th></tr>"
    )
    rows = []
    for req in requests:
        last = req.records[-1]
        status_class = "done" if req.outcome is not None else "open"
        if req.outcome is not None and req.outcome.status is RecordStatus.FAILED:
            status_class = "failed"
        rows.append(
            f"<tr><td><strong>{_e(req.ref)}</strong></td>"
            f'<td><code title="{_e(req.subject_hash)}">{_e(req.subject_hash[:16])}…</code></td>'
            f'<td><span class="status {status_class}">{_e(_words(req.status))}</span></td>'
            f"<td>{_e(req.effective_date)}</td><td>{len(req.records)}</td>"
            f"<td>{_e(last.created_at.strftime('%Y-%m-%d %H:%M'))}</td>"
            f'<td><a href="{_e(_export_link(req.ref, "html"))}" target="_blank" '
            f'rel="noopener">evidence page</a> · <a href="{_e(_export_link(req.ref, "json"))}" '
            'target="_blank" rel="noopener">JSON pack</a></td></tr>'
        )
    return f"<table>{head}{''.join(rows)}</table>"


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


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5rem 2rem;
color:#1f2933;background:#fff;max-width:80rem}
h1{font-size:1.5rem;margin:0 0 1rem}h2{font-size:1.15rem;margin:1.75rem 0 .5rem}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.35rem .6rem;
border-bottom:1px solid #e4e7eb;vertical-align:top}th{background:#f5f7fa;font-weight:600}
code{font:12px/1.3 ui-monospace,SFMono-Regular,Menlo,monospace}
.verify{padding:.75rem 1rem;border-radius:6px;border:1px solid}
.verify.ok{background:#e3f9e5;border-color:#57ae5b;color:#05400a}
.verify.bad{background:#ffe3e3;border-color:#e12d39;color:#610316}
.verify.unknown{background:#fffbea;border-color:#f0b429;color:#513c06}
.status{padding:.1rem .45rem;border-radius:4px;white-space:nowrap}
.status.done{background:#e3f9e5}.status.open{background:#fffbea}.status.failed{background:#ffe3e3}
a{color:#0b69a3}.note{color:#52606d;margin-top:2rem;font-size:12px}
"""
