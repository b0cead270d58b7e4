"""Running erasure on this machine, outside any deployment.

- `local.demo` is `make demo`: one erasure through the real DAG under `dag.test()`, on the
  sample estate (`erasure.sample`) with an embedded OpenBao.
- `local.up` is `make up`: Airflow standalone with this repository's DAGs and plugin, OpenBao
  and the sample estate, kept running; the end-to-end tests reuse its `Stack`.
- `local.bench` is `make bench`: the benchmarks, each printing ratios against a baseline
  measured in the same run.
"""
