# erasure-airflow-connections: Airflow's Vault secrets backend (apache-airflow-providers-
# hashicorp VaultBackend) on the workers, reading the catalog's warehouse connection from the
# KV v2 mount `airflow` at connections/<conn id>. Attached beside erasure-worker and
# erasure-crm-ingest when connections live in Vault rather than in Kubernetes Secrets.

path "airflow/data/connections/erasure_*" {
  capabilities = ["read"]
}

# The chain-head anchor's history is evidence: no identity may delete, destroy or undelete a
# version, or delete its metadata. A deny wins over any broader policy the identity also holds.
path "erasure-kv/data/anchors/*" {
  capabilities = ["deny"]
}
path "erasure-kv/delete/anchors/*" {
  capabilities = ["deny"]
}
path "erasure-kv/destroy/anchors/*" {
  capabilities = ["deny"]
}
path "erasure-kv/undelete/anchors/*" {
  capabilities = ["deny"]
}
path "erasure-kv/metadata/anchors/*" {
  capabilities = ["deny"]
}
