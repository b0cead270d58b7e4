"""`make up`: this repo's DAGs and plugin in `airflow standalone`, with Vault and the sample
estate.

`local.up.stack` builds and runs the stack (the end-to-end tests reuse it); `python -m
local.up` keeps it in the foreground until Ctrl-C.
"""
