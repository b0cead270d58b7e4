"""The act step: each artefact's action as a plain, idempotent function over models.

`erase_rows` deletes the subject's rows from located roots; `rebuild` re-materialises derived
artefacts from their cleaned upstreams. Neither imports Airflow: the DAG maps them to tasks.
"""
