"""The JSON API under `/erasure/api/v1`: lineage ingest, requests, completion records.

Submitting a request is the desk's (`erasure_airflow.api.desk`).

Each route is a thin call into `erasure`; who may call it is in `erasure_airflow.api.auth`.
"""

from __future__ import annotations

import logging
import zlib
from datetime import UTC, date, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel

from erasure.audit.chain import ChainReport
from erasure.audit.export import export_json, render_html
from erasure.audit.outcome import RequestOutcome, by_request, outcome_of
from erasure.audit.records import CompletionRecord, RecordStatus
from erasure.deadlines import DUE_SOON_DAYS, Deadline, deadline_of
from erasure.errors import LineageError
from erasure.model import REQUEST_REF, Cycle, Gap, Plan
from erasure.registry.action_log import ActionRecord, ActionStatus
from erasure.registry.requests import RegisteredRequest, RequestBook, RequestStatus
from erasure_airflow.api.auth import LineageWriterDep, ReaderDep, backend_of
from erasure_airflow.api.backend import ErasureBackend

log = logging.getLogger(__name__)

MAX_EVENT_BYTES = 64 * 1024 * 1024  # one event, or a batch of a few thousand

router = APIRouter(prefix="/api/v1")
NO_SUCH_REQUEST = (
    "no erasure request with that reference is registered: check the reference (the desk and "
    "GET /erasure/api/v1/requests list them)"
)
NO_RECORDS = (
    "there are no completion records for a request with that reference: check the reference "
    "(GET /erasure/api/v1/records lists the records)"
)
BackendDep = Annotated[ErasureBackend, Depends(backend_of)]


# ---------------------------------------------------------------------------------------------
# Documents


class RootSummary(BaseModel):
    dataset: str
    identifier_type: str
    rows: int
    via: str
    shared_referrers: int


class PlanItemSummary(BaseModel):
    dataset: str
    kind: str
    action: str
    rule: str
    reason: str


class PlanSummary(BaseModel):
    """A stored plan without its per-item evidence: what will be done where, and why."""

    version: int
    created_at: datetime
    lineage_snapshot: str
    coverage: float
    truncated: bool
    roots: list[RootSummary]
    items: list[PlanItemSummary]
    actions: dict[str, int]  # action -> number of artefacts
    gaps: list[Gap]
    cycles: list[Cycle]


class ActionSummary(BaseModel):
    dataset: str
    action: str
    status: ActionStatus
    attempts: int
    updated_at: datetime


class RequestSummary(BaseModel):
    """A request as the registry holds it: keyed hash, dates, status; never the identifier."""

    request_ref: str
    status: RequestStatus
    identifier_type: str
    subject_hash: str
    legal_ground: str
    received_on: date
    due_on: date
    extended_until: date | None
    effective_due_on: date
    overdue: bool
    dry_run: bool
    run_id: str
    submission_destroyed_at: datetime | None
    secrets_destroyed_at: datetime | None
    created_at: datetime
    updated_at: datetime
    on_record: RequestOutcome  # what its completion records say (the records page's status)


class RequestDetail(RequestSummary):
    extension_reason: str | None
    plan_versions: list[int]
    plan: PlanSummary | None  # the latest version
    actions: list[ActionSummary]


class RecordSummary(BaseModel):
    """A completion record without its body and signature (the list view)."""

    seq: int
    request_ref: str
    subject_hash: str
    kind: str
    status: str | None
    created_at: datetime
    prev_hash: str
    record_hash: str
    signing_key_version: int


class IngestResponse(BaseModel):
    event_id: str
    stored: bool  # False: an identical event was stored before


class BatchIngestResponse(BaseModel):
    """A JSON array of events: what happened to each, in order, and the counts."""

    received: int
    stored: int
    duplicates: int
    quarantined: int  # malformed elements, kept with their reason; the others are stored
    results: list[dict[str, object]]  # {"event_id", "stored"} or {"index", "error"}


# ---------------------------------------------------------------------------------------------
# Lineage


@router.post(
    "/lineage",
    status_code=status.HTTP_201_CREATED,
    response_model=IngestResponse | BatchIngestResponse,
    responses={200: {"description": "Already stored"}, 400: {"description": "Malformed"}},
    # Read as bytes (it may be gzip); declared for the schema: one RunEvent or an array.
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "oneOf": [
                            {"type": "object"},
                            {"type": "array", "items": {"type": "object"}},
                        ]
                    }
                }
            },
        }
    },
)
async def ingest_lineage(
    request: Request, caller: LineageWriterDep, backend: BackendDep
) -> JSONResponse:
    """Marquez-compatible OpenLineage ingest: one RunEvent or JobEvent (static lineage), or a
    JSON array of them.

    Every event is validated, stored once and projected into the lineage store in the same
    transaction (a batch in one). Malformed ones are quarantined with their reason: a single
    malformed event is a 400, a malformed element of an array is counted in the answer (with
    its index), and an array of malformed elements only is a 400 with the same answer.
    """
    body = await _event_body(request)
    lineage = backend.lineage()
    try:
        # Decoded in the worker thread, not on the event loop: a batch is megabytes of JSON.
        report = await run_in_threadpool(lambda: lineage.ingest_body(body, origin="http"))
    except LineageError as exc:  # not JSON at all (quarantined whole)
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
    created = report.stored > 0
    if body.lstrip()[:1] == b"[":  # a JSON array: Marquez's batch
        # BatchIngestResponse's fields, as built by the store: validating and dumping a
        # result per event through the model cost more than storing the events.
        batch = {name: getattr(report, name) for name in BatchIngestResponse.model_fields}
        # A refused element is named by its place in the array; the others are stored.
        batch["results"] = [
            {"index": index, **result} if "error" in result else result
            for index, result in enumerate(report.results)
        ]
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        if report.received and report.quarantined == report.received:
            code = status.HTTP_400_BAD_REQUEST  # nothing in it was an event: say so plainly
        return JSONResponse(batch, status_code=code)
    (result,) = report.results
    if "error" in result:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(result["error"]))
    document = IngestResponse(event_id=str(result["event_id"]), stored=bool(result["stored"]))
    return JSONResponse(
        document.model_dump(),
        status_code=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
    )


async def _event_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_EVENT_BYTES:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, _too_large())
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity", "gzip", "deflate"):
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            "this Content-Encoding is not supported: send the JSON as it is (identity), or "
            "compressed with gzip or deflate",
        )
    # Read as it arrives, compressed or not: a chunked body (no Content-Length) or a gzip
    # bomb is refused once it passes the cap, never held whole in memory first.
    decompressor = None
    if encoding in ("gzip", "deflate"):  # the OpenLineage HTTP transport's `compression`
        decompressor = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    body = bytearray()
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > MAX_EVENT_BYTES:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, _too_large())
        if decompressor is None:
            body += chunk
            continue
        try:
            body += decompressor.decompress(chunk, MAX_EVENT_BYTES + 1 - len(body))
        except zlib.error:
            raise HTTPException(
                status.HTTP_400_BAD_REQUEST, f"the body is not valid {encoding} data"
            ) from None
        if len(body) > MAX_EVENT_BYTES or decompressor.unconsumed_tail:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, _too_large())
    if decompressor is not None:
        try:
            body += decompressor.flush()
        except zlib.error:
            raise HTTPException(
                status.HTTP_400_BAD_REQUEST, f"the body is not valid {encoding} data"
            ) from None
        if not decompressor.eof:
            raise HTTPException(
                status.HTTP_400_BAD_REQUEST, f"the body is not valid {encoding} data: it ends early"
            )
    if len(body) > MAX_EVENT_BYTES:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, _too_large())
    return bytes(body)


def _too_large() -> str:
    return (
        f"an OpenLineage request body may be at most {MAX_EVENT_BYTES // (1024 * 1024)} MiB; "
        "send a large batch as several arrays"
    )


# ---------------------------------------------------------------------------------------------
# Requests


@router.get("/requests")
def list_requests(
    caller: ReaderDep, backend: BackendDep, status: RequestStatus | None = None
) -> list[RequestSummary]:
    """Every request (or those in `status`), oldest received first."""
    today = datetime.now(UTC).date()
    records = by_request(backend.ledger().list())
    return [
        _summary(r, today, outcome_of(records.get(r.request_ref, []), r))
        for r in backend.requests().list(status)
    ]


@router.get("/requests/{ref}")
def get_request(ref: str, caller: ReaderDep, backend: BackendDep) -> RequestDetail:
    """One request: its dates and status, its latest plan and its action log."""
    record = _registered(backend.requests(), ref)
    versions = backend.plans().versions(ref)
    plan = backend.plans().get(ref, 1) if versions else None  # acted on; later ones re-check
    on_record = outcome_of(backend.ledger().show(ref), record)
    return RequestDetail(
        **_summary(record, datetime.now(UTC).date(), on_record).model_dump(),
        extension_reason=record.extension_reason,
        plan_versions=versions,
        plan=_plan_summary(plan, versions[-1]) if plan is not None else None,
        actions=[_action(a) for a in backend.action_log().list(ref)],
    )


def _registered(requests: RequestBook, ref: str) -> RegisteredRequest:
    found = requests.get(ref) if REQUEST_REF.match(ref) else None
    if found is None:
        # The ref is not echoed: it may be an identifier typed in the wrong place.
        raise HTTPException(status.HTTP_404_NOT_FOUND, NO_SUCH_REQUEST)
    return found


def _summary(r: RegisteredRequest, today: date, on_record: RequestOutcome) -> RequestSummary:
    return RequestSummary(
        request_ref=r.request_ref,
        status=r.status,
        identifier_type=r.identifier_type,
        subject_hash=r.subject_hash,
        legal_ground=r.legal_ground.value,
        received_on=r.received_on,
        due_on=r.due_on,
        extended_until=r.extended_until,
        effective_due_on=r.effective_due_on,
        overdue=deadline_of(r, today, DUE_SOON_DAYS) is Deadline.OVERDUE,
        dry_run=r.dry_run,
        run_id=r.run_id,
        submission_destroyed_at=r.submission_destroyed_at,
        secrets_destroyed_at=r.secrets_destroyed_at,
        created_at=r.created_at,
        updated_at=r.updated_at,
        on_record=on_record,
    )


def _plan_summary(plan: Plan, version: int) -> PlanSummary:
    counts: dict[str, int] = {}
    for item in plan.items:
        counts[item.action.value] = counts.get(item.action.value, 0) + 1
    return PlanSummary(
        version=version,
        created_at=plan.created_at,
        lineage_snapshot=plan.lineage_snapshot,
        coverage=plan.coverage,
        truncated=plan.truncated,
        roots=[
            RootSummary(
                dataset=root.dataset.qualified,
                identifier_type=root.identifier_type,
                rows=root.rows,
                via=root.via,
                shared_referrers=root.shared_referrers,
            )
            for root in plan.roots
        ],
        items=[
            PlanItemSummary(
                dataset=item.dataset.qualified,
                kind=item.kind,
                action=item.action.value,
                rule=item.rule,
                reason=item.reason,
            )
            for item in plan.items
        ],
        actions=counts,
        gaps=plan.gaps,
        cycles=plan.cycles,
    )


def _action(a: ActionRecord) -> ActionSummary:
    return ActionSummary(
        dataset=a.dataset.qualified,
        action=a.action,
        status=a.status,
        attempts=a.attempts,
        updated_at=a.updated_at,
    )


# ---------------------------------------------------------------------------------------------
# Completion records (the auditor's API)


@router.get("/records")
def list_records(
    caller: ReaderDep,
    backend: BackendDep,
    since: date | None = None,
    status: RecordStatus | None = None,
) -> list[RecordSummary]:
    """Records in chain order, created on or after `since` (YYYY-MM-DD), with `status`."""
    return [record_summary(r) for r in backend.ledger().list(since=since, status=status)]


# Declared before /records/{ref}: "verify" is also a well-formed request reference.
@router.get("/records/verify")
def verify_records(caller: ReaderDep, backend: BackendDep) -> ChainReport:
    """Walk the whole chain: hashes, links, sequence, signatures, head."""
    return verify_chain(backend)


@router.get("/records/{ref}")
def show_records(ref: str, caller: ReaderDep, backend: BackendDep) -> list[CompletionRecord]:
    """Every record of request `ref`, bodies included, in chain order."""
    return _records_of(backend, ref)


@router.get(
    "/records/{ref}/export",
    responses={200: {"content": {"application/json": {}, "text/html": {}}}},
)
def export_records(
    ref: str,
    caller: ReaderDep,
    backend: BackendDep,
    fmt: Annotated[Literal["json", "html"], Query(alias="format")] = "json",
) -> Response:
    """The request's evidence pack: JSON (checkable offline) or one self-contained page."""
    _records_of(backend, ref)
    pack = export_json(backend.ledger(signed=True), ref)
    if fmt == "html":
        return HTMLResponse(render_html(pack))
    return JSONResponse(
        pack, headers={"Content-Disposition": f'inline; filename="evidence-{ref}.json"'}
    )


def record_summary(record: CompletionRecord) -> RecordSummary:
    return RecordSummary(
        **record.model_dump(mode="json", exclude={"body", "signature", "kind", "status"}),
        kind=record.kind.value,
        status=record.status.value if record.status is not None else None,
    )


def verify_chain(backend: ErasureBackend) -> ChainReport:
    """The chain report, compared with the heads published in Vault; without Vault, 503 (an
    empty chain proves nothing: a wiped store is one)."""
    return backend.ledger(signed=True).verify()


def _records_of(backend: ErasureBackend, ref: str) -> list[CompletionRecord]:
    records = backend.ledger().show(ref) if REQUEST_REF.match(ref) else []
    if not records:  # the ref is not echoed (as above)
        raise HTTPException(status.HTTP_404_NOT_FOUND, NO_RECORDS)
    return records
