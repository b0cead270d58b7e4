"""Who may call the erasure API: Airflow users by role, and two machine credentials.

Every route needs an authenticated Airflow user (Bearer JWT or the UI's `_token` cookie,
resolved by Airflow's own `get_user`), else 401. Under the simple auth manager the role
decides (403 otherwise):

- read (requests, records, verify, export, the records page): viewer, user, op, admin --
  auditors are given `viewer`;
- act (scrub, discard, lineage ingest): op, admin -- the DPO is given `op` (or `admin`).

Under another auth manager (FAB, Keycloak) users carry no simple role: reading is
`is_authorized_custom_view(method="GET", resource_name="Erasure")`, acting the same with
"POST", so an admin grants the Auditor and DPO roles those permissions there.

Machines do not log in: OpenLineage producers send `Authorization: Bearer
<ERASURE_LINEAGE_API_KEY>` to the lineage endpoint, and the erasure DAG sends
`X-Erasure-Task-Token: hex(HMAC-SHA256(ERASURE_TASK_TOKEN_KEY, "scrub:<ref>"))` to scrub its
own request, or `"discard:<run_id>"` to discard its own rejected submission, which is all
that token allows.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Literal

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.core_api.security import GetUserDep, bearer_scheme, get_user
from fastapi import Depends, Header, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials

from erasure_api.backend import ErasureBackend

RESOURCE_NAME = "Erasure"  # the custom-view resource other auth managers grant
TASK_TOKEN_HEADER = "X-Erasure-Task-Token"


class Role(StrEnum):
    """The simple auth manager's fixed roles."""

    VIEWER = "viewer"
    USER = "user"
    OP = "op"
    ADMIN = "admin"


READ_ROLES = frozenset(Role)
ACT_ROLES = frozenset({Role.OP, Role.ADMIN})

_READ_DENIED = "reading the erasure API needs the viewer, user, op or admin role"
_ACT_DENIED = (
    "this erasure action is the DPO's: it needs the op or admin role (viewers and users read)"
)


@dataclass(frozen=True)
class Caller:
    """Who made the request: a user by name, or a machine credential."""

    name: str
    kind: Literal["user", "lineage_api_key", "task_token"]


def backend_of(request: Request) -> ErasureBackend:
    """The backend of the erasure app that serves this request."""
    backend: ErasureBackend = request.app.state.erasure
    return backend


TaskPurpose = Literal["scrub", "discard"]


def task_token(key: str, target: str, purpose: TaskPurpose = "scrub") -> str:
    """The task token that lets its holder scrub request `target` (or discard run `target`)
    and nothing else."""
    return hmac.new(key.encode(), f"{purpose}:{target}".encode(), hashlib.sha256).hexdigest()


def role_of(user: BaseUser) -> Role | None:
    """The simple auth manager role of `user` (None for another auth manager's users)."""
    raw = getattr(user, "role", None)
    if not isinstance(raw, str):
        return None
    try:
        return Role(raw.lower())
    except ValueError:
        return None


def may(user: BaseUser, *, act: bool) -> bool:
    """Whether `user` may read (act=False) or act (act=True) in the erasure API."""
    role = role_of(user)
    if role is not None:
        return role in (ACT_ROLES if act else READ_ROLES)
    if hasattr(user, "role"):  # a simple-auth user without a known role has no permission
        return False
    return get_auth_manager().is_authorized_custom_view(
        method="POST" if act else "GET", resource_name=RESOURCE_NAME, user=user
    )


def _caller(user: BaseUser) -> Caller:
    return Caller(name=user.get_name(), kind="user")


async def reader(user: GetUserDep) -> Caller:
    """Any Airflow user with a role: auditors (viewer) and up."""
    if not may(user, act=False):
        raise HTTPException(status.HTTP_403_FORBIDDEN, _READ_DENIED)
    return _caller(user)


async def lineage_writer(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> Caller:
    """The lineage API key as a Bearer token, or an op/admin user."""
    if credentials is not None and credentials.scheme.lower() == "bearer":
        key = backend_of(request).api_settings().lineage_api_key
        if key is not None and hmac.compare_digest(
            credentials.credentials.encode(), key.get_secret_value().encode()
        ):
            return Caller(name="openlineage", kind="lineage_api_key")
    user = await get_user(request, None, credentials)
    if not may(user, act=True):
        raise HTTPException(status.HTTP_403_FORBIDDEN, _ACT_DENIED)
    return _caller(user)


async def scrubber(
    request: Request,
    ref: str,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
    token: Annotated[str | None, Header(alias=TASK_TOKEN_HEADER)] = None,
) -> Caller:
    """The task token for scrubbing this `ref`, or an op/admin user. A wrong token is 403."""
    return await _task_or_actor(request, credentials, token, ref, "scrub")


async def discarder(
    request: Request,
    run_id: str,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
    token: Annotated[str | None, Header(alias=TASK_TOKEN_HEADER)] = None,
) -> Caller:
    """The task token for discarding this `run_id`, or an op/admin user."""
    return await _task_or_actor(request, credentials, token, run_id, "discard")


async def _task_or_actor(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None,
    token: str | None,
    target: str,
    purpose: TaskPurpose,
) -> Caller:
    if token is not None:
        key = backend_of(request).api_settings().task_token_key
        if key is None:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"{TASK_TOKEN_HEADER} is not accepted: ERASURE_TASK_TOKEN_KEY is not set on the "
                "Airflow API server",
            )
        expected = task_token(key.get_secret_value(), target, purpose)
        if not hmac.compare_digest(token.strip().lower().encode(), expected.encode()):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN, f"the {TASK_TOKEN_HEADER} is not valid for this request"
            )
        return Caller(name="gdpr_erasure task", kind="task_token")
    user = await get_user(request, None, credentials)
    if not may(user, act=True):
        raise HTTPException(status.HTTP_403_FORBIDDEN, _ACT_DENIED)
    return _caller(user)


ReaderDep = Annotated[Caller, Depends(reader)]
LineageWriterDep = Annotated[Caller, Depends(lineage_writer)]
ScrubberDep = Annotated[Caller, Depends(scrubber)]
DiscarderDep = Annotated[Caller, Depends(discarder)]
