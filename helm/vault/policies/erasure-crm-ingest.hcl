# erasure-crm-ingest: the crm_ingest DAG. It hashes each loaded identifier under every pepper
# version to drop suppressed subjects, and needs nothing else from Vault.

path "erasure-kv/data/pepper" {
  capabilities = ["read"]
}
path "erasure-kv/metadata/pepper" {
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
