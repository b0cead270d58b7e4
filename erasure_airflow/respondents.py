"""Who may answer the DPO's prompts, as the erasure plugin tells the tasks' service account.

`assign_prompts` assigns every prompt to these users, so Airflow itself refuses anyone
else's answer (403, Admin included); `record_rulings` hands `workflow.rule` the DPO roles of
the user who did answer, and the ruling of anyone without one is refused. Under `dag.test()`
(ERASURE_AIRFLOW_ACCESS=inprocess) no API server runs to ask: None, nothing is assigned, and
the role check is off there (ERASURE_REQUIRE_DPO_ROLE=false).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from erasure.config import Settings, env_name
from erasure.errors import ConfigError, ErasureError

RESPONDENTS_PATH = "/erasure/api/v1/respondents"


class NoRespondent(ErasureError):
    """No active Airflow user holds a DPO role: nobody could answer the prompts."""


def dpo_respondents(settings: Settings) -> list[dict[str, Any]] | None:
    """The users holding a DPO role, [{"id", "name", "roles"}]; None where nothing can tell."""
    if settings.airflow_access == "inprocess" or not settings.require_dpo_role:
        return None
    if settings.airflow_api_user is None or settings.airflow_api_password is None:
        raise ConfigError(
            f"set {env_name('airflow_api_user')} and {env_name('airflow_api_password')}: the "
            "erasure tasks ask the API server which users hold a DPO role"
        )
    with httpx.Client(base_url=settings.airflow_api_url.rstrip("/"), timeout=30) as client:
        login = client.post(
            "/auth/token",
            json={
                "username": settings.airflow_api_user,
                "password": settings.airflow_api_password.get_secret_value(),
            },
        )
        if login.status_code != 201:
            raise ErasureError(
                f"{settings.airflow_api_user} cannot log in to Airflow (HTTP "
                f"{login.status_code}): check {env_name('airflow_api_password')}"
            )
        answer = client.get(
            RESPONDENTS_PATH,
            headers={"Authorization": f"Bearer {login.json()['access_token']}"},
        )
    if answer.status_code != 200:
        raise ErasureError(
            f"GET {RESPONDENTS_PATH} answered HTTP {answer.status_code} "
            f"({answer.text[:300]}): {settings.airflow_api_user} needs can_read on Erasure "
            "Respondents (role ErasureTasks)"
        )
    return list(answer.json()["respondents"])


def assigned_users(respondents: list[dict[str, Any]], dpo_roles: list[str]) -> list[dict[str, str]]:
    """HITLOperator's `assigned_users` for these respondents; NoRespondent when there is none."""
    if not respondents:
        raise NoRespondent(
            f"no active Airflow user holds a DPO role ({', '.join(dpo_roles)}; "
            f"{env_name('dpo_roles')}), so nobody may answer the prompts: give the DPO her "
            "role, then clear this task"
        )
    return [{"id": str(r["id"]), "name": str(r["name"])} for r in respondents]


def author_roles(
    respondents: list[dict[str, Any]] | None, responded_by: Mapping[str, Any] | None
) -> frozenset[str] | None:
    """The DPO roles of the user who answered (empty: none); None where nothing can tell."""
    if respondents is None:
        return None
    author = str((responded_by or {}).get("id") or "")
    for respondent in respondents:
        if str(respondent["id"]) == author:
            return frozenset(str(role) for role in respondent["roles"])
    return frozenset()
