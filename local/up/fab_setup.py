"""The local stack's FAB roles and users: the chart's roles, one login per role.

Run by `local.up.components` in Airflow's environment before any component starts
(`python -m local.up.fab_setup`), after the metadata DB is migrated. The roles and their
permissions are read from helm/values.yaml (`fab.roles`) and applied by the chart's own
helm/files/fab_roles.py, so `make up` grants exactly what production grants. The users and
their passwords come from the stack's passwords file (see `local.up.stack.USERS`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART_VALUES = REPO / "helm" / "values.yaml"
CHART_ROLES_SCRIPT = REPO / "helm" / "files" / "fab_roles.py"


def chart_roles(values: Path = CHART_VALUES) -> dict[str, list[list[str]]]:
    """The FAB roles the chart grants: role -> [[action, resource], ...]."""
    loaded = yaml.safe_load(values.read_text())
    roles: dict[str, list[list[str]]] = loaded["fab"]["roles"]
    return roles


def chart_roles_script() -> ModuleType:
    """helm/files/fab_roles.py, the script the chart's hook Job runs, as a module."""
    spec = importlib.util.spec_from_file_location("erasure_fab_roles", CHART_ROLES_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def apply(users: dict[str, str], passwords: dict[str, str]) -> list[str]:
    """Create the chart's roles, Airflow's own (Admin), and each user with its one role."""
    from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder

    script = chart_roles_script()
    done: list[str] = []
    with get_application_builder() as appbuilder:
        sm: Any = appbuilder.sm
        done += script.ensure_roles(sm, chart_roles())
        sm.sync_roles()  # Airflow's built-in roles; Admin gets every permission, ours included
        for user, role in users.items():
            done.append(script.ensure_user(sm, user, role, passwords[user]))
    return done


def main() -> int:
    from local.up.stack import PASSWORDS_FILE, USERS

    home = Path(os.environ["AIRFLOW_HOME"])
    passwords = json.loads((home / PASSWORDS_FILE).read_text())
    for line in apply(USERS, passwords):
        print(f"fab setup: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
