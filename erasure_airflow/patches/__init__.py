"""Workarounds for races in Airflow itself, one module each.

Each module names the Airflow versions it applies to (`AIRFLOW_VERSIONS`, a SpecifierSet)
and the upstream issue (`UPSTREAM`); tests/integration/test_airflow_patches.py fails, saying
to remove the patch, once the installed Airflow is outside that range or no longer has the
flaw the patch works around.

    executor.py      [core] executor = erasure_airflow.patches.executor.ResumeSafeLocalExecutor:
                     a resumed HITL task is not failed on its parked workload's stale exit
    hitl_resume.py   API-server middleware (registered by the plugin): a prompt answered while
                     its task parked is resumed
"""
