"""FAB configuration of the Airflow API server, rendered by the erasure chart.

Users sign in with FAB's database accounts unless the chart's fab.extraConfig (appended below)
switches to OAuth/LDAP and maps groups to the erasure roles with AUTH_ROLES_MAPPING. The roles
themselves, with their permissions, are created by the erasure-fab-roles hook Job.
"""

from flask_appbuilder.const import AUTH_DB

AUTH_TYPE = AUTH_DB
AUTH_ROLE_PUBLIC = None  # no anonymous access to anything
AUTH_USER_REGISTRATION = False  # accounts are made by an admin, never by self-registration
WTF_CSRF_ENABLED = True

# The role names the erasure plugin, the DPO desk and the runbooks rely on.
ERASURE_ROLES = ("DPO", "Auditor", "Operator", "ErasureTasks")
