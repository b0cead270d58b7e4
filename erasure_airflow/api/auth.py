"""Who may call the erasure API: Airflow users by permission and role, and one machine key.

Every route needs an authenticated Airflow user (Bearer JWT or the UI's `_token` cookie,
resolved by Airflow's own `get_user`), else 401 (a browser asking for a page is sent to
Airflow's login instead, and back to the page after it: `login_url`); a user without the
access is 403. Each route asks for one `Access`:

    access       FAB auth manager (production, `make up`)        simple auth manager
    read         can_read on Erasure                              viewer, user, op, admin
    desk         can_read on Erasure Desk                         op, admin
    submit       can_create on Erasure, and a role of             op, admin
                 ERASURE_DPO_ROLES (default DPO)
    respondents  can_read on Erasure Respondents                  user, op, admin

The chart's roles (helm/values.yaml fab.roles) grant them: Auditor reads; DPO reads, uses
the desk and submits; Operator reads and uses the desk; ErasureTasks reads the respondents.
Submitting also needs the DPO role by name, the same test `workflow.rule` applies to a
ruling: FAB gives Admin every permission, and still Admin is not the DPO. Under another auth
manager (Keycloak, ...) the permissions are `is_authorized_custom_view` on those resources,
and the role test applies where its users carry `roles`.

Lineage ingest is the machines' alone: OpenLineage producers send `Authorization: Bearer
<ERASURE_LINEAGE_API_KEY>` to the lineage endpoint, which is all that key allows, and no
login (token or the UI's cookie) is accepted there (401 without the key or with a wrong one,
saying which; 403 for a user's login). What a state-changing request must carry besides a
credential (JSON, same origin) is in `erasure_airflow.api.csrf`.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Literal
from urllib.parse import quote, urlencode

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.core_api.security import (
    GetUserDep,
    bearer_scheme,
    resolve_user_from_token,
)
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials

from erasure_airflow.api.backend import ErasureBackend

RESOURCE_NAME = "Erasure"  # records, requests, evidence (read); the DPO's acts (create)
DESK_RESOURCE = "Erasure Desk"  # the desk: every request, its deadline, prompts, failures
RESPONDENTS_RESOURCE = "Erasure Respondents"  # who may answer the DPO's prompts


class Role(StrEnum):
    """The simple auth manager's fixed roles."""

    VIEWER = "viewer"
    USER = "user"
    OP = "op"
    ADMIN = "admin"


class Access(StrEnum):
    """What a route lets its caller do."""

    READ = "read"
    DESK = "desk"
    SUBMIT = "submit"
    RESPONDENTS = "respondents"


# Custom-view permission (method, resource) of each access under FAB and other managers.
PERMISSIONS: dict[Access, tuple[Literal["GET", "POST"], str]] = {
    Access.READ: ("GET", RESOURCE_NAME),
    Access.DESK: ("GET", DESK_RESOURCE),
    Access.SUBMIT: ("POST", RESOURCE_NAME),
    Access.RESPONDENTS: ("GET", RESPONDENTS_RESOURCE),
}
SIMPLE_ROLES: dict[Access, frozenset[Role]] = {
    Access.READ: frozenset(Role),
    Access.DESK: frozenset({Role.OP, Role.ADMIN}),
    Access.SUBMIT: frozenset({Role.OP, Role.ADMIN}),
    Access.RESPONDENTS: frozenset({Role.USER, Role.OP, Role.ADMIN}),
}
DENIED: dict[Access, str] = {
    Access.READ: (
        "reading the erasure API needs can_read on Erasure (roles Auditor, DPO, Operator; "
        "viewer and above under the simple auth manager)"
    ),
    Access.DESK: (
        "the erasure desk is the DPO's and the operators': it needs can_read on Erasure Desk "
        "(roles DPO, Operator; op or admin under the simple auth manager)"
    ),
    Access.SUBMIT: (
        "this erasure action is the DPO's: it needs can_create on Erasure and a DPO role "
        "({dpo_roles}; op or admin under the simple auth manager)"
    ),
    Access.RESPONDENTS: (
        "who may answer the DPO's prompts is for the tasks' service account: it needs "
        "can_read on Erasure Respondents"
    ),
}


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


def role_names(user: BaseUser) -> frozenset[str] | None:
    """The names of the roles a FAB (or FAB-like) user holds; None where users carry none."""
    roles = getattr(user, "roles", None)
    if roles is None or isinstance(roles, str):
        return None
    return frozenset(str(getattr(role, "name", role)) for role in roles)


def may(user: BaseUser, access: Access, *, dpo_roles: frozenset[str] = frozenset()) -> bool:
    """Whether `user` has `access`; SUBMIT also needs one of `dpo_roles` where roles exist."""
    role = role_of(user)
    if role is not None:
        return role in SIMPLE_ROLES[access]
    if hasattr(user, "role"):  # a simple-auth user without a known role has no permission
        return False
    method, resource = PERMISSIONS[access]
    if not get_auth_manager().is_authorized_custom_view(
        method=method, resource_name=resource, user=user
    ):
        return False
    if access is Access.SUBMIT and dpo_roles:
        held = role_names(user)
        return held is None or bool(held & dpo_roles)
    return True


def login_url(request: Request) -> str:
    """Airflow's login page, returning after it to the page asked for. `next` is that page's
    path and query, relative: an absolute URL would be built from the Host header, which a
    forger sets, and send the person to another site once logged in. A path segment or query
    value that is not reference-like (an email pasted into a URL) is not carried into the
    login URL, whose query Airflow's access log keeps: such a path returns to Airflow's home,
    such a parameter is dropped."""
    path = request.scope["path"]
    if not all(_SAFE_IN_NEXT.fullmatch(segment) for segment in path.split("/")):
        return get_auth_manager().get_url_login(next_url="/")
    page = "/" + quote(path, safe="/").lstrip("/")  # never `//host`
    kept = [
        (name, value)
        for name, value in request.query_params.multi_items()
        if _SAFE_IN_NEXT.fullmatch(name) and _SAFE_IN_NEXT.fullmatch(value)
    ]
    query = urlencode(kept, safe="*")
    return get_auth_manager().get_url_login(next_url=f"{page}?{query}" if query else page)


# What a `next` may carry: references, route words, dates, statuses, `REQ-2026-*` filters;
# no run of seven digits or more (a phone number or an account number, not a date's).
_SAFE_IN_NEXT = re.compile(r"(?![^/]*[0-9]{7})[A-Za-z0-9._*:-]{0,64}")


def _caller(user: BaseUser) -> Caller:
    return Caller(name=user.get_name(), kind="user")


def dpo_roles_of(request: Request) -> frozenset[str]:
    """The roles that make a user the DPO (ERASURE_DPO_ROLES); none when the check is off."""
    settings = backend_of(request).settings()
    return frozenset(settings.dpo_roles) if settings.require_dpo_role else frozenset()


def requires(access: Access) -> Callable[[Request, BaseUser], Awaitable[Caller]]:
    """A dependency: the logged-in caller, if they have `access` (else 403 saying what)."""

    async def check(request: Request, user: GetUserDep) -> Caller:
        dpo_roles = dpo_roles_of(request) if access is Access.SUBMIT else frozenset()
        if not may(user, access, dpo_roles=dpo_roles):
            names = ", ".join(sorted(dpo_roles)) or "DPO"
            raise HTTPException(status.HTTP_403_FORBIDDEN, DENIED[access].format(dpo_roles=names))
        return _caller(user)

    return check


LINEAGE_KEY_MISSING = (
    "lineage ingest takes the lineage API key only: send Authorization: Bearer "
    "<ERASURE_LINEAGE_API_KEY> (the OpenLineage transport's api_key); a login, cookie or "
    "token, is not accepted here"
)
LINEAGE_KEY_INVALID = (
    "the lineage API key is not valid: check the OpenLineage transport's api_key against "
    "ERASURE_LINEAGE_API_KEY on the Airflow API server"
)
LINEAGE_NOT_FOR_USERS = (
    "lineage ingest takes the lineage API key only, not a user's login: producers send "
    "Authorization: Bearer <ERASURE_LINEAGE_API_KEY>; to load event files by hand use "
    "`erasure lineage ingest`"
)
LINEAGE_CLOSED = (
    "lineage ingest over HTTP is closed: no lineage API key is set; set "
    "ERASURE_LINEAGE_API_KEY (16 characters or more) on the Airflow API server"
)


async def lineage_writer(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> Caller:
    """The lineage API key as a Bearer token, and nothing else: not a user's JWT, never the
    UI's cookie (a page open in the DPO's browser must not be able to write lineage)."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            LINEAGE_KEY_MISSING,
            headers={"WWW-Authenticate": "Bearer"},
        )
    key = backend_of(request).settings().lineage_api_key
    if key is not None and hmac.compare_digest(
        credentials.credentials.encode(), key.get_secret_value().encode()
    ):
        return Caller(name="openlineage", kind="lineage_api_key")
    if await _is_login(credentials.credentials):
        raise HTTPException(status.HTTP_403_FORBIDDEN, LINEAGE_NOT_FOR_USERS)
    if key is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, LINEAGE_CLOSED)
    raise HTTPException(
        status.HTTP_401_UNAUTHORIZED, LINEAGE_KEY_INVALID, headers={"WWW-Authenticate": "Bearer"}
    )


async def _is_login(token: str) -> bool:
    """Whether `token` is a valid Airflow login (JWT) of some user."""
    try:
        await resolve_user_from_token(token)
    except Exception:  # expired, forged, a deleted user: not a login, whatever the reason
        return False
    return True


ReaderDep = Annotated[Caller, Depends(requires(Access.READ))]
DeskDep = Annotated[Caller, Depends(requires(Access.DESK))]
DpoDep = Annotated[Caller, Depends(requires(Access.SUBMIT))]
LineageWriterDep = Annotated[Caller, Depends(lineage_writer)]
RespondentsDep = Annotated[Caller, Depends(requires(Access.RESPONDENTS))]
