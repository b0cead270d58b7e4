"""`GET /erasure/api/v1/respondents`: the users who may answer the DPO's prompts.

Tasks may not read Airflow's users (no ORM on workers, and the REST API's user list would
show them every account), so the plugin, inside the API server, answers this one question
for the tasks' service account: which active users hold a role of ERASURE_DPO_ROLES, by the
id the auth manager gives them. The erasure DAG assigns each prompt to them (Airflow then
refuses any other user's answer) and `workflow.rule` checks the answering user's roles.
"""

from __future__ import annotations

from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, Depends, HTTPException, status
from pydantic import BaseModel

from erasure_airflow.api.auth import RespondentsDep, backend_of
from erasure_airflow.api.backend import ErasureBackend

router = APIRouter(prefix="/api/v1")


class Respondent(BaseModel):
    """A user who may answer: the auth manager's id and name, and the DPO roles held."""

    id: str
    name: str
    roles: list[str]


class Respondents(BaseModel):
    dpo_roles: list[str]
    respondents: list[Respondent]


@router.get("/respondents")
def list_respondents(
    caller: RespondentsDep, backend: Annotated[ErasureBackend, Depends(backend_of)]
) -> Respondents:
    """Every active user holding one of the DPO roles (ERASURE_DPO_ROLES)."""
    dpo_roles = sorted(set(backend.settings().dpo_roles))
    return Respondents(dpo_roles=dpo_roles, respondents=holders_of(frozenset(dpo_roles)))


def holders_of(roles: frozenset[str]) -> list[Respondent]:
    """The active users holding any of `roles`, under the running auth manager."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    manager = get_auth_manager()
    if isinstance(manager, SimpleAuthManager):
        return [
            Respondent(id=user.get_id(), name=user.get_name(), roles=[str(user.role)])
            for user in manager.get_users()
            if user.role in roles
        ]
    if any(kind.__name__ == "FabAuthManager" for kind in type(manager).__mro__):  # or ours
        return _fab_holders_of(roles)
    raise HTTPException(
        status.HTTP_501_NOT_IMPLEMENTED,
        f"the erasure plugin cannot list the users of {type(manager).__name__}: set "
        "ERASURE_REQUIRE_DPO_ROLE=false on the workers and grant HITL Detail to the DPOs only",
    )


def _fab_holders_of(roles: frozenset[str]) -> list[Respondent]:
    from airflow.providers.fab.auth_manager.models import Role, User
    from airflow.utils.session import create_session

    with create_session() as session:
        users = session.scalars(
            sa.select(User)
            .join(User.roles)
            .where(Role.name.in_(sorted(roles)), User.active.is_(True))
            .order_by(User.id)
            .distinct()
        ).all()
        return [
            Respondent(
                id=user.get_id(),
                name=user.get_name(),
                roles=sorted(role.name for role in user.roles if role.name in roles),
            )
            for user in users
        ]
