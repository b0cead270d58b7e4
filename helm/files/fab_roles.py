"""Create the erasure FAB roles with their permissions, and the tasks' service user.

Run by the erasure-fab-roles hook Job: `python fab_roles.py roles.json`, with Airflow's
metadata DB configured and ERASURE_TASKS_PASSWORD set. Idempotent. The chart owns these
roles: each ends with exactly the permissions listed (a grant added by hand to one of them is
removed on the next upgrade, and says so; give extra grants through a role of your own).
`make up` runs the same functions over the same roles (helm/values.yaml `fab.roles`), so the
local stack is the chart's.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

TASKS_ROLE = "ErasureTasks"


def ensure_roles(sm: Any, roles: dict[str, list[list[str]]]) -> list[str]:
    """Each role with exactly its permissions ([action, resource]); what was done, per role."""
    done = []
    for name, permissions in roles.items():
        role = sm.find_role(name) or sm.add_role(name)
        wanted = [sm.create_permission(action, resource) for action, resource in permissions]
        added = [p for p in wanted if p not in role.permissions]
        for permission in added:
            sm.add_permission_to_role(role, permission)
        removed = [p for p in list(role.permissions) if p not in wanted]
        for permission in removed:
            sm.remove_permission_from_role(role, permission)
        line = f"role {name}: {len(wanted)} permission(s), {len(added)} added"
        if removed:
            line += ", removed: " + ", ".join(
                f"{p.action.name} on {p.resource.name}" for p in removed
            )
        done.append(line)
    return done


def ensure_user(sm: Any, username: str, role_name: str, password: str) -> str:
    """The database user `username` with exactly the role `role_name` and this password."""
    role = sm.find_role(role_name)
    if role is None:
        raise SystemExit(f"role {role_name} does not exist: create the roles first")
    user = sm.find_user(username=username)
    if user is None:
        sm.add_user(
            username=username,
            first_name=username,
            last_name="(erasure)",
            email=f"{username}@erasure.invalid",
            role=role,
            password=password,
        )
        return f"user {username} created with role {role_name}"
    user.roles = [role]
    user.active = True
    sm.update_user(user)
    sm.reset_password(user.id, password)
    return f"user {username} updated: role {role_name}, password reset"


def main(path: str) -> int:
    from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder

    with open(path) as handle:
        spec = json.load(handle)
    password = os.environ.get("ERASURE_TASKS_PASSWORD", "")
    if not password:
        print("ERASURE_TASKS_PASSWORD is empty: set tasks-password in the connections Secret")
        return 2
    with get_application_builder() as appbuilder:
        for line in ensure_roles(appbuilder.sm, spec["roles"]):
            print(line)
        print(ensure_user(appbuilder.sm, spec["tasks_user"], TASKS_ROLE, password))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
