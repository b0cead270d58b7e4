"""Who may call the erasure API: Airflow users by role, and one machine credential.

Every route needs an authenticated Airflow user (Bearer JWT or the UI's `_token` cookie,
resolved by Airflow's own `get_user`), else 401. Under the simple auth manager the role
decides (403 otherwise):

- read (requests, records, verify, export, the records page): viewer, user, op, admin --
  auditors are given `viewer`;
- act (submit a request on the desk, lineage ingest): op, admin -- the DPO is given `op`
  (or `admin`).

Under another auth manager (FAB, Keycloak) users carry no simple role: reading is
`is_authorized_custom_view(method="GET", resource_name="Erasure")`, acting the same with
"POST", so an admin grants the Auditor and DPO roles those permissions there.

Machines do not log in: OpenLineage producers send `Authorization: Bearer
<ERASURE_LINEAGE_API_KEY>` to the lineage endpoint, which is all that key allows.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Literal

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.core_api.security import GetUserDep, bearer_scheme, get_user
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials

from erasure_api.backend import ErasureBackend

RESOURCE_NAME = "Erasure"  # the custom-view resource other auth managers grant


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
    kind: Literal["user", "lineage_api_key"]


def backend_of(request: Request) -> ErasureBackend:
    """The backend of the erasure app that serves this request."""
    backend: ErasureBackend = request.app.state.erasure
    return backend


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


async def dpo(user: GetUserDep) -> Caller:
    """The DPO: op or admin under the simple auth manager, the act permission under others."""
    if not may(user, act=True):
        raise HTTPException(status.HTTP_403_FORBIDDEN, _ACT_DENIED)
    return _caller(user)


ReaderDep = Annotated[Caller, Depends(reader)]
LineageWriterDep = Annotated[Caller, Depends(lineage_writer)]
DpoDep = Annotated[Caller, Depends(dpo)]
