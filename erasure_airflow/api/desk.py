"""The erasure desk's front door: `POST /erasure/api/v1/requests` and the page that calls it.

The DPO's submission is validated with the request model, sealed at once with the Vault
transit key `submissions` (the API server may encrypt with it, never decrypt: see
helm/vault/policies/erasure-api.hcl), kept sealed in the erasure store, and the
`gdpr_erasure` run is created here, in the API server, with a conf that holds the request
reference and the sealed submission's handle only. Nothing the DPO typed reaches Airflow's
metadata database: not the run's conf, not the audit log (this route writes none), not an
error (messages name the field, never its value).
"""

from __future__ import annotations

import html
import json
import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from erasure.catalog import Catalog
from erasure.errors import RequestError, SubjectError
from erasure.free_text import NamesSubject, refuse_identifying_reference
from erasure.identifier_types import WrongIdentifierType, refuse_misfit
from erasure.intake import Ticket
from erasure.locate import normalise_subject
from erasure.model import REQUEST_REF, REQUEST_REF_PATTERN, SubjectRef
from erasure.submission import LEGAL_GROUNDS, ErasureRequest
from erasure_airflow.api.auth import Caller, DpoDep, backend_of
from erasure_airflow.api.backend import ErasureBackend
from erasure_airflow.api.rendering import render
from erasure_airflow.api.routes import NO_SUCH_REQUEST

log = logging.getLogger(__name__)

ERASURE_DAG_ID = "gdpr_erasure"
EXTEND_DAG_ID = "gdpr_erasure_extend"
MAX_SUBMISSION_BYTES = 64 * 1024
MAX_RESUBMISSIONS = 50  # run ids erasure-<ref>, erasure-<ref>-2, ... for refused submissions

api = APIRouter(prefix="/api/v1")
pages = APIRouter()
BackendDep = Annotated[ErasureBackend, Depends(backend_of)]


class Submitted(BaseModel):
    """What the desk answers: where the request now lives. Never the identifier."""

    request_ref: str
    run_id: str
    submission: str  # the sealed submission's handle, as the run's conf holds it
    request_url: str
    run_url: str


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A model's JSON schema with its `$defs` written in place (OpenAPI resolves `$ref`s
    from the document's root, where a model's own `$defs` are not)."""
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    inlined: dict[str, Any] = inline(schema)
    return inlined


# The body is read by hand (sealed before any model holds it), so the schema is declared here.
_SUBMISSION_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": _inlined(ErasureRequest.model_json_schema())}},
    }
}


@api.post("/requests", status_code=status.HTTP_201_CREATED, openapi_extra=_SUBMISSION_BODY)
async def submit_request(request: Request, caller: DpoDep, backend: BackendDep) -> Submitted:
    """Seal a new erasure request and start its `gdpr_erasure` run (the DPO's desk)."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        # A JSON body is also what keeps a cross-site form from submitting in the DPO's name.
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            "send the request as a JSON object (Content-Type: application/json)",
        )
    body = await request.body()
    if len(body) > MAX_SUBMISSION_BYTES:
        raise HTTPException(
            status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            f"a submission is at most {MAX_SUBMISSION_BYTES} bytes",
        )
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # deep nesting too
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST, "the body is not valid JSON (UTF-8 JSON object)"
        ) from None
    if not isinstance(data, dict):
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "the body must be a JSON object")
    try:
        submission = ErasureRequest.parse(data)
    except RequestError as exc:  # names each bad field and what it allows, never its value
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    return await run_in_threadpool(_submit, backend, submission, caller)


def _submit(backend: ErasureBackend, submission: ErasureRequest, caller: Caller) -> Submitted:
    _refuse_misfit(backend, submission)
    ref = submission.request_ref
    registered = backend.requests().get(ref)
    if registered is not None:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            "a request with this reference is already registered (status "
            f"{registered.status.value}): one reference, one erasure; use a new reference for "
            "a new request",
        )
    box = backend.submissions()
    if box.held(ref):
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            "this reference was submitted already and its run has not registered it yet: "
            "follow it on the desk",
        )
    ticket = box.seal(submission)
    try:
        run_id = _start_run(ticket, caller.name)
    except BaseException:
        box.destroy(ticket)  # no run will ever open it
        raise
    log.info("request %s submitted by %s: run %s", ref, caller.name, run_id)
    return Submitted(
        request_ref=ref,
        run_id=run_id,
        submission=ticket.submission,
        request_url=f"/erasure/api/v1/requests/{ref}",
        run_url=f"/dags/{ERASURE_DAG_ID}/runs/{run_id}",
    )


def _refuse_misfit(backend: ErasureBackend, submission: ErasureRequest) -> None:
    """422 for a value that cannot be of the type chosen (an address typed as a customer id),
    naming the type it looks like, and for a reference that names the subject or holds a phone
    number: refused before anything is sealed or any run started."""
    catalog = _catalog(backend)
    if catalog is None:
        return  # the register step checks both against the catalog the workers read
    value = submission.identifier.get_secret_value()
    try:
        refuse_misfit(catalog.identifiers, submission.identifier_type, value)
        identity = normalise_subject(
            catalog, SubjectRef(type=submission.identifier_type, value=SecretStr(value))
        )
        refuse_identifying_reference(catalog, submission.request_ref, [identity])
    except (WrongIdentifierType, NamesSubject, SubjectError) as exc:  # never the value
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"invalid erasure request: {exc}"
        ) from None


def _start_run(ticket: Ticket, user: str) -> str:
    """Create the run in Airflow's metadata DB (the API server may use the ORM)."""
    import sqlalchemy as sa
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    base = f"erasure-{ticket.request_ref}"
    with create_session() as session:
        taken = set(
            session.scalars(
                sa.select(DagRun.run_id).where(
                    DagRun.dag_id == ERASURE_DAG_ID, DagRun.run_id.startswith(base)
                )
            )
        )
        # A refused submission leaves its failed run: a corrected one takes the next id.
        candidates = [base, *(f"{base}-{n}" for n in range(2, MAX_RESUBMISSIONS + 1))]
        run_id = next((c for c in candidates if c not in taken), None)
        if run_id is None:
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"this reference was submitted {MAX_RESUBMISSIONS} times: use a new reference",
            )
        _create_run(ERASURE_DAG_ID, run_id, ticket.conf(), user, session)
    return run_id


def _create_run(dag_id: str, run_id: str, conf: dict[str, Any], user: str, session: Any) -> None:
    """A run of `dag_id` created for `user`, who is its triggering user (nobody may trigger
    the erasure DAGs over Airflow's API: erasure_airflow/auth.py)."""
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.exceptions import DagNotFound, DagRunAlreadyExists
    from airflow.utils.types import DagRunTriggeredByType

    try:
        trigger_dag(
            dag_id,
            triggered_by=DagRunTriggeredByType.REST_API,
            triggering_user_name=user,
            run_id=run_id,
            conf=conf,
            session=session,
        )
    except DagNotFound:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"the {dag_id} DAG is not loaded in Airflow yet: check the DAG processor and "
            "`airflow dags list-import-errors`",
        ) from None
    except DagRunAlreadyExists:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            "this request's run was created by another call a moment ago: follow it on the desk",
        ) from None


class Extension(BaseModel):
    """The DPO's extension of a deadline (Art. 12(3)): by how long, and why."""

    model_config = ConfigDict(extra="forbid")

    months: Literal[1, 2]
    reason: str = Field(min_length=10, max_length=2000)


class Extending(BaseModel):
    """What the desk answers: the run that records the extension (signed, with her name)."""

    request_ref: str
    run_id: str
    run_url: str


@api.post("/requests/{ref}/extend", status_code=status.HTTP_201_CREATED)
async def extend_request(
    ref: str, extension: Extension, caller: DpoDep, backend: BackendDep
) -> Extending:
    """Extend an open request's deadline by one or two months, once: the DPO's desk action.
    The `gdpr_erasure_extend` run is created here in her name, and the signed `extended`
    record names her."""
    return await run_in_threadpool(_extend, backend, ref, extension, caller)


def _extend(backend: ErasureBackend, ref: str, extension: Extension, caller: Caller) -> Extending:
    import re
    from datetime import UTC, datetime

    from airflow.utils.session import create_session

    registered = backend.requests().get(ref) if re.fullmatch(REQUEST_REF_PATTERN, ref) else None
    if registered is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, NO_SUCH_REQUEST)
    if registered.closed:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"the request is {registered.status.value}: nothing to extend",
        )
    if registered.extended_until is not None:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"the request was extended already (to {registered.extended_until}): Art. 12(3) "
            "allows one extension",
        )
    run_id = f"extend-{ref}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%f')}"
    # Sealed like a submission: the worker checks it names nobody before it is kept anywhere.
    sealed = backend.submissions().seal_text(extension.reason)
    conf = {"request_ref": ref, "months": extension.months, "sealed_reason": sealed}
    with create_session() as session:
        _create_run(EXTEND_DAG_ID, run_id, conf, caller.name, session)
    log.info("extension of request %s asked for by %s: run %s", ref, caller.name, run_id)
    return Extending(request_ref=ref, run_id=run_id, run_url=f"/dags/{EXTEND_DAG_ID}/runs/{run_id}")


# ---------------------------------------------------------------------------------------------
# The page


@pages.get("/requests/new", response_class=HTMLResponse)
def new_request_page(caller: DpoDep, backend: BackendDep, ref: str = "") -> HTMLResponse:
    """The DPO's form (`ref` prefills the reference: the desk's "submit a corrected request");
    it posts JSON to the route above with the UI's login cookie, from this origin)."""
    catalog = _catalog(backend)
    identifier_types = sorted(catalog.identifiers) if catalog is not None else []
    return HTMLResponse(render_new_request_page(identifier_types, ref=ref))


def _catalog(backend: ErasureBackend) -> Catalog | None:
    """The catalog; None if it cannot be read (the form still works: the register step names
    a wrong type)."""
    try:
        return backend.catalog()
    except Exception:
        log.warning("the catalog could not be read for the erasure desk", exc_info=True)
        return None


def render_new_request_page(identifier_types: list[str], *, ref: str = "") -> str:
    e = html.escape
    if identifier_types:
        # No default: a type chosen for the DPO files an address as a customer id.
        options = '<option value="">choose…</option>' + "".join(
            f'<option value="{e(t)}">{e(t)}</option>' for t in identifier_types
        )
        type_input = (
            f'<select id="identifier_type" name="identifier_type" required>{options}</select>'
        )
    else:
        type_input = '<input id="identifier_type" name="identifier_type" required>'
    grounds = "".join(
        f'<option value="{e(g.value)}"{" selected" if g.value == "art17_1_b" else ""}>'
        f"{e(label)}</option>"
        for g, label in LEGAL_GROUNDS.items()
    )
    pattern = e(REQUEST_REF_PATTERN.strip("^$"))
    ref = ref if REQUEST_REF.fullmatch(ref) else ""  # anything else is not shown
    return render(
        "new_request.html", type_input=type_input, grounds=grounds, pattern=pattern, ref=e(ref)
    )
