# erasure-airflow-connections: Airflow's Vault secrets backend (apache-airflow-providers-
# hashicorp VaultBackend) on the workers, reading the catalog's warehouse connection from the
# KV v2 mount `airflow` at connections/<conn id>. Attached beside erasure-worker and
# erasure-crm-ingest when connections live in Vault rather than in Kubernetes Secrets.

path "airflow/data/connections/erasure_*" {
  capabilities = ["read"]
}
