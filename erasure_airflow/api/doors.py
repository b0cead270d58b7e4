"""API-server middlewares: what is typed into Airflow's own routes about an erasure run is
checked before Airflow stores any of it.

**Prompt answers** (`SealPromptAnswers`). Airflow keeps a HITL answer's `params_input` in
`hitl_detail`, in `hitl_detail_history` once the prompt is asked again, and in the audit `log`
row its answer route writes before the route runs. A justification naming the subject would
be refused by the erasure, but only after Airflow kept it. The API server cannot tell whether
it does (only a worker may open the request's parked identifier and the personal data
located), so on the one route that answers a prompt (`PATCH .../hitlDetails`) of
`gdpr_erasure`'s `dpo_decides` this middleware

- refuses, with 400 and nothing stored, an answer that is not what the prompt's form sends:
  one option label, and exactly the prompt's params (a date where a date goes, an exemption
  from the list, a justification of text, not empty, at most MAX_JUSTIFICATION characters,
  not a handle); the message names the field, never the value;
- seals the justification (Vault transit key `submissions`, encrypt-only for the API server)
  into the erasure store's `sealed_notes`, bound to the one prompt answered, and hands Airflow
  the answer with the note's handle in its place;
- destroys the note again when Airflow refuses the answer (not a respondent, answered twice).

The prompt's task (erasure_airflow.operators.DpoPrompt) opens the note, checks that it names
nobody (erasure.free_text), records it with the ruling and destroys it, refused or not.

**Triggers** (`DeskOnlyTriggers`). Only the erasure desk creates `gdpr_erasure` and
`gdpr_erasure_extend` runs (in the API server, with a sealed conf). The erasure's auth manager
refuses anyone's trigger of them; this refuses it under any auth manager, before the body
(a conf that may hold an identifier, or keys no param declares) is read or logged.

Nothing of Airflow's is patched: these are root middlewares the plugin registers.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator
from datetime import date
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from erasure.errors import ConfigError, StoreError, VaultError, invalid_fields
from erasure.intake import NOTE_HANDLE, note_binding
from erasure.pseudonym import canonical_text
from erasure.rulings import MAX_JUSTIFICATION, OPTION_LABELS, Exemption
from erasure_airflow.api.backend import ErasureBackend, Unavailable
from erasure_airflow.api.desk import ERASURE_DAG_ID, EXTEND_DAG_ID

log = logging.getLogger(__name__)

# The DAGs whose runs only the erasure desk creates, and Airflow's routes that would create
# one (a trigger, a backfill) or keep free text about one (a run's or task's note).
DESK_ONLY = frozenset({ERASURE_DAG_ID, EXTEND_DAG_ID})
DAG_ROUTE = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)(?P<rest>/.*)?$")
BACKFILLS = re.compile(r"/api/v2/backfills(?:/dry_run)?/?$")
# Airflow's HITL answer route, any map index spelling; the prompts answered through it.
HITL_PATH = re.compile(
    r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/(?P<run_id>[^/]+)/taskInstances/"
    r"(?P<task_id>[^/]+)/(?P<map_index>[^/]+)/hitlDetails/?$"
)
PROMPT_DAGS = frozenset({ERASURE_DAG_ID})
PROMPT_TASKS = frozenset({"dpo_decides"})
MAP_INDEX = re.compile(r"-1|0|[1-9][0-9]*")
MAX_BODY = 64 * 1024  # bytes: an answer is one label, a justification and three short fields
_LABELS = frozenset(OPTION_LABELS.values())


class PromptParams(BaseModel):
    """The params of a `dpo_decides` prompt, as its form sends them (dags/gdpr_erasure.py)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    justification: str = Field(max_length=MAX_JUSTIFICATION)
    scheduled_by: date | None
    exemption: Exemption | None
    standing_until: date | None

    @field_validator("scheduled_by", "exemption", "standing_until", mode="before")
    @classmethod
    def _unset(cls, value: Any) -> Any:
        """A field the form left empty may come as an empty string."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("justification")
    @classmethod
    def _reason(cls, value: str) -> str:
        if not canonical_text(value):  # blank, or zero-width characters alone
            raise ValueError("must not be empty; say why the DPO decided this")
        if NOTE_HANDLE.match(value.strip()):
            raise ValueError("type the reason itself, not a handle")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("is not valid Unicode text") from None
        return value


class PromptAnswer(BaseModel):
    """The body of an answer to a `dpo_decides` prompt."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    chosen_options: list[str] = Field(min_length=1, max_length=1)
    params_input: PromptParams

    @field_validator("chosen_options")
    @classmethod
    def _labels(cls, value: list[str]) -> list[str]:
        if any(label not in _LABELS for label in value):
            raise ValueError("must be one of the prompt's buttons: " + "; ".join(sorted(_LABELS)))
        return value


class Refused(Exception):
    """An answer refused at the door; the message names fields, never values."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _plugin_backend() -> ErasureBackend:
    from erasure_airflow.api import app

    backend: ErasureBackend = app.state.erasure
    return backend


class SealPromptAnswers:
    """Pure ASGI middleware around Airflow's root app (registered by erasure_airflow.plugin).
    `backend`: where notes are sealed (default: the erasure app's own)."""

    def __init__(self, app: Any, backend: Callable[[], ErasureBackend] = _plugin_backend) -> None:
        self.app = app
        self._backend = backend

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        found = HITL_PATH.search(scope.get("path", "")) if scope["type"] == "http" else None
        if found is None or found["dag_id"] not in PROMPT_DAGS or scope.get("method") != "PATCH":
            await self.app(scope, receive, send)
            return
        try:
            binding = _binding(scope, found)
            body = await _read_body(receive)
            if body is None:
                raise Refused(f"the answer is larger than {MAX_BODY:,} bytes", 413)
            sealed, handle = await run_in_threadpool(self._seal, body, binding)
        except Refused as exc:
            await JSONResponse({"detail": str(exc)}, exc.status)(scope, receive, send)
            return
        except (Unavailable, StoreError, VaultError, ConfigError) as exc:
            log.warning("a DPO's answer could not be sealed: %s", exc)
            detail = (
                "the erasure cannot seal the justification now (Vault or the erasure store is "
                "not reachable from the API server: its log says which); answer again shortly"
            )
            await JSONResponse({"detail": detail}, status_code=503)(scope, receive, send)
            return

        status: list[int] = []

        async def watched(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[:] = [int(message["status"])]
            await send(message)

        try:
            await self.app(*_with_body(scope, receive, sealed), watched)
        finally:
            if status != [200]:  # Airflow did not take the answer: the note goes with it
                await run_in_threadpool(self._destroy, handle, binding)

    def _seal(self, body: bytes, binding: str) -> tuple[bytes, str]:
        """The answer with its justification replaced by a sealed note's handle."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            raise Refused("the answer must be a JSON object") from None
        try:
            answer = PromptAnswer.model_validate(data)
        except ValidationError as exc:
            raise Refused(
                f"the answer cannot be taken ({_problems(exc)}): nothing of it was stored; "
                "correct it and answer again"
            ) from None
        params = answer.params_input
        handle = self._backend().submissions().seal_note(params.justification, binding)
        sealed = {
            "chosen_options": answer.chosen_options,
            "params_input": {**params.model_dump(mode="json"), "justification": handle},
        }
        return json.dumps(sealed).encode("utf-8"), handle

    def _destroy(self, handle: str, binding: str) -> None:
        try:
            self._backend().submissions().destroy_note(handle, binding)
        except (Unavailable, StoreError) as exc:  # the daily reconciler sweeps it
            log.error("a refused answer's sealed note %s is still kept: %s", handle, exc)


def _binding(scope: Any, found: re.Match[str]) -> str:
    """The prompt a PATCH answers, as a note is bound to it; Refused for any other shape of
    the route than the one the form uses (Airflow reads `-1.0`, `+0` or `1_0` as an index,
    and logs a query string whole)."""
    if found["task_id"] not in PROMPT_TASKS or not MAP_INDEX.fullmatch(found["map_index"]):
        raise Refused(
            "an erasure prompt is answered at .../taskInstances/dpo_decides/<map index>/"
            "hitlDetails (the map index as Airflow shows it): nothing of this was stored"
        )
    if scope.get("query_string"):
        raise Refused("an answer takes no query string: nothing of this was stored")
    if not _has_credentials(scope):
        raise Refused("log in first: nothing of this was stored", 401)
    # `path` is decoded already: the run id as Airflow reads it, as the worker binds it.
    return note_binding(found["dag_id"], found["run_id"], found["task_id"], int(found["map_index"]))


def _has_credentials(scope: Any) -> bool:
    """Whether the request carries a Bearer token or the UI's cookie (Airflow checks which)."""
    for name, value in scope.get("headers", []):
        if name == b"authorization" and value.lower().startswith(b"bearer "):
            return True
        if name == b"cookie" and b"_token=" in value:
            return True
    return False


def _with_body(scope: Any, receive: Any, body: bytes) -> tuple[Any, Any]:
    """`scope` and a `receive` that hand the app `body` (read already) once, then pass on
    what the client sends next (a disconnect)."""
    given = False

    async def replay() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return dict(await receive())

    headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode("ascii")))
    return {**scope, "headers": headers}, replay


def _problems(exc: ValidationError) -> str:
    """Where and what, with an unknown field's name (it was typed) left out."""
    return "; ".join(
        ".".join(str(p) for p in (*i.loc[:-1], "<unknown field>")) + ": not a field of this prompt"
        if i.kind == "extra_forbidden"
        else f"{i.where}: {i.message}"
        for i in invalid_fields(exc)
    )


async def _read_body(receive: Any) -> bytes | None:
    """The request body, or None past MAX_BODY (what was sent is not read further)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


class DeskOnlyTriggers:
    """Pure ASGI middleware around Airflow's root app (registered by erasure_airflow.plugin):
    no run of a desk-only DAG is triggered or backfilled, and no note is written on one, over
    Airflow's API, whoever asks; refused before Airflow reads (and logs) the body."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        method = scope.get("method")
        path = scope.get("path", "") if scope["type"] == "http" else ""
        route = DAG_ROUTE.search(path)
        # `~` is every DAG: Airflow's bulk routes name each entity's DAG in the body.
        if route is not None and (route["dag_id"] in DESK_ONLY or route["dag_id"] == "~"):
            if method == "POST" and route["rest"] in ("/dagRuns", "/dagRuns/"):
                await _refuse(scope, receive, send, route["dag_id"], "triggered")
                return
            if method in ("PATCH", "PUT", "POST") and route["rest"]:
                body = await _read_body(receive)
                if body is None:
                    await _too_large(scope, receive, send)
                    return
                data = _parsed(body)
                desk_only = route["dag_id"] in DESK_ONLY or bool(_strings(data) & DESK_ONLY)
                if desk_only and _sets(data, "note"):
                    await _refuse(scope, receive, send, route["dag_id"], "given a note")
                    return
                await self.app(*_with_body(scope, receive, body), send)
                return
        elif method == "POST" and BACKFILLS.search(path):
            body = await _read_body(receive)
            if body is None:
                await _too_large(scope, receive, send)
                return
            data = _parsed(body)
            dag_id = data.get("dag_id") if isinstance(data, dict) else None
            if dag_id in DESK_ONLY:
                await _refuse(scope, receive, send, str(dag_id), "backfilled")
                return
            await self.app(*_with_body(scope, receive, body), send)
            return
        await self.app(scope, receive, send)


async def _refuse(scope: Any, receive: Any, send: Any, dag_id: str, what: str) -> None:
    detail = (
        f"runs of {dag_id} are created by the erasure desk alone (Browse > Erasure desk) and "
        f"are not {what} over Airflow's API: nothing of this request was stored"
    )
    await JSONResponse({"detail": detail}, 403)(scope, receive, send)


async def _too_large(scope: Any, receive: Any, send: Any) -> None:
    detail = f"the body is larger than {MAX_BODY:,} bytes: nothing of it was stored"
    await JSONResponse({"detail": detail}, 413)(scope, receive, send)


def _parsed(body: bytes) -> Any:
    """The JSON body (its escapes decoded: `"gdpr\\u005ferasure"` is that DAG), or None when
    it is not JSON (Airflow then refuses it, 422, without reading a note or a DAG id)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _nodes(data: Any) -> Iterator[Any]:
    """Every value of a parsed JSON document, however deep (a body is at most MAX_BODY)."""
    stack = [data]
    while stack:
        value = stack.pop()
        yield value
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def _strings(data: Any) -> set[str]:
    return {v for v in _nodes(data) if isinstance(v, str)}


def _sets(data: Any, key: str) -> bool:
    """Whether any object of the document sets `key` to anything but null or empty."""
    return any(isinstance(v, dict) and v.get(key) not in (None, "") for v in _nodes(data))
