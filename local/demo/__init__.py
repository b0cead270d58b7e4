"""Run the gdpr_erasure DAG in-process (`dag.test()`) on the embedded defaults: `make demo`."""
