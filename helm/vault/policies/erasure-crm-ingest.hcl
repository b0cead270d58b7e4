# erasure-crm-ingest: the crm_ingest DAG. It hashes each loaded identifier under every pepper
# version to drop suppressed subjects, and needs nothing else from Vault.

path "erasure-kv/data/pepper" {
  capabilities = ["read"]
}
path "erasure-kv/metadata/pepper" {
  capabilities = ["read"]
}
