"""The Airflow side of erasure, one installed package: every Airflow component imports it.

The domain (`erasure`) never imports Airflow; this package adapts it, the way Airflow's
providers do. Airflow finds it by configuration and by entry point, never by a folder on
sys.path:

    plugin.py        the AirflowPlugin (entry point `airflow.plugins: erasure`): the app under
                     /erasure, the Browse menu links, the listener, the API-server middlewares
    api/             the FastAPI app it mounts: JSON API, the DPO's desk, the records pages
    auth.py          [core] auth_manager = erasure_airflow.auth.ErasureAuthManager
    listener.py      a run or task set to a state by hand, recorded in the API server
    operators.py     RebuildOperator, DpoPrompt (the erasure DAG's own operators)
    tasks.py         what every erasure task shares: services, plan order, failure record
    celery_config.py [celery] celery_config_options: the domain loaded before a worker forks
    triggers.py      DagRunEndTrigger (the triggerer imports it by classpath)
    connections.py   catalog connections resolved through Airflow's connections
    respondents.py   who holds a DPO role: whom the prompts are assigned to
    rebuild_runs.py  running a rematerialisation DAG (REST, or in process under dag.test())
    patches/         workarounds for Airflow bugs, each with the versions it applies to, its
                     upstream issue and a test that fails once Airflow no longer needs it

`dags/` holds DAG files only, importing what they need from here. Importing this package
imports nothing else.
"""
