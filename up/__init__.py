"""`make up`: this repo's DAGs and plugin in `airflow standalone`, with Vault and the demo estate.

`up.stack` builds and runs the stack (the end-to-end tests reuse it); `python -m up` keeps it in
the foreground until Ctrl-C.
"""
