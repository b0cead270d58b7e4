"""Create the erasure FAB roles with their permissions, and the tasks' service user.

Run by the erasure-fab-roles hook Job: `python fab_roles.py roles.json`, with Airflow's
metadata DB configured and ERASURE_TASKS_PASSWORD set. Idempotent: it adds what is missing
and never removes a permission an admin granted by hand.
"""

from __future__ import annotations

import json
import os
import sys

from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder

TASKS_ROLE = "ErasureTasks"


def main(path: str) -> int:
    with open(path) as handle:
        spec = json.load(handle)
    password = os.environ.get("ERASURE_TASKS_PASSWORD", "")
    if not password:
        print("ERASURE_TASKS_PASSWORD is empty: set tasks-password in the connections Secret")
        return 2
    with get_application_builder() as appbuilder:
        sm = appbuilder.sm
        for name, permissions in spec["roles"].items():
            role = sm.find_role(name) or sm.add_role(name)
            added = 0
            for action, resource in permissions:
                permission = sm.create_permission(action, resource)
                if permission not in role.permissions:
                    sm.add_permission_to_role(role, permission)
                    added += 1
            print(f"role {name}: {len(permissions)} permission(s), {added} added")
        username = spec["tasks_user"]
        tasks_role = sm.find_role(TASKS_ROLE)
        user = sm.find_user(username=username)
        if user is None:
            sm.add_user(
                username=username,
                first_name="erasure",
                last_name="tasks",
                email=f"{username}@erasure.invalid",
                role=tasks_role,
                password=password,
            )
            print(f"user {username} created with role {TASKS_ROLE}")
        else:
            user.roles = [tasks_role]
            sm.update_user(user)
            sm.reset_password(user.id, password)
            print(f"user {username} updated: role {TASKS_ROLE}, password from the Secret")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
