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
from collections.abc import Callable
from datetime import date
from typing import Any
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from erasure.errors import ConfigError, StoreError, VaultError, invalid_fields
from erasure.intake import NOTE_HANDLE, note_binding
from erasure.pseudonym import canonical_text
from erasure.rulings import MAX_JUSTIFICATION, OPTION_LABELS, Exemption
from erasure_airflow.api.backend import ErasureBackend, Unavailable
from erasure_airflow.api.desk import ERASURE_DAG_ID, EXTEND_DAG_ID
from erasure_airflow.patches.hitl_resume import HITL_ANSWER

log = logging.getLogger(__name__)

# Airflow's trigger route (POST), and the DAGs whose runs only the erasure desk creates.
DAG_RUNS = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns$")
DESK_ONLY = frozenset({ERASURE_DAG_ID, EXTEND_DAG_ID})
# The prompts whose answers are checked here: (dag_id, task_id).
ERASURE_PROMPTS = frozenset({(ERASURE_DAG_ID, "dpo_decides")})
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
        found = HITL_ANSWER.search(scope.get("path", "")) if scope["type"] == "http" else None
        if found is None or scope.get("method") != "PATCH":
            await self.app(scope, receive, send)
            return
        prompt = {k: unquote(v) for k, v in found.groupdict().items()}
        if (prompt["dag_id"], prompt["task_id"]) not in ERASURE_PROMPTS:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        try:
            if body is None:
                raise Refused(f"the answer is larger than {MAX_BODY:,} bytes", 413)
            binding = note_binding(
                prompt["dag_id"], prompt["run_id"], prompt["task_id"], int(prompt["map_index"])
            )
            sealed, handle = await run_in_threadpool(self._seal, body, binding)
        except Refused as exc:
            await JSONResponse({"detail": str(exc)}, exc.status)(scope, receive, send)
            return
        except (Unavailable, StoreError, VaultError, ConfigError) as exc:
            log.warning("a DPO's answer could not be sealed: %s", exc)
            detail = f"the erasure cannot seal the justification now ({exc}); answer again shortly"
            await JSONResponse({"detail": detail}, status_code=503)(scope, receive, send)
            return

        status: list[int] = []

        async def replay() -> dict[str, Any]:
            if not status:
                status.append(0)  # the body is read once
                return {"type": "http.request", "body": sealed, "more_body": False}
            return dict(await receive())

        async def watched(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[:] = [int(message["status"])]
            await send(message)

        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(sealed)).encode("ascii")))
        try:
            await self.app({**scope, "headers": headers}, replay, watched)
        finally:
            if status != [200]:  # Airflow did not take the answer: the note goes with it
                await run_in_threadpool(self._destroy, handle)

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

    def _destroy(self, handle: str) -> None:
        try:
            self._backend().submissions().destroy_note(handle)
        except (Unavailable, StoreError) as exc:  # the prompt's task never opens it
            log.error("a refused answer's sealed note %s is still kept: %s", handle, exc)


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
    """Pure ASGI middleware around Airflow's root app (registered by erasure_airflow.plugin)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        found = DAG_RUNS.search(scope.get("path", "")) if scope["type"] == "http" else None
        if (
            found is None
            or scope.get("method") != "POST"
            or unquote(found["dag_id"]) not in DESK_ONLY
        ):
            await self.app(scope, receive, send)
            return
        detail = (
            f"runs of {unquote(found['dag_id'])} are created by the erasure desk alone (Browse > "
            "Erasure desk): nothing of this request was read or stored"
        )
        await JSONResponse({"detail": detail}, 403)(scope, receive, send)
