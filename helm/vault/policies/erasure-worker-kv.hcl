# erasure-worker-kv: attached beside erasure-worker only where ERASURE_KEYSTORE_KIND=kv.
# KV keys are random data keys that the worker reads in the clear: a copy may exist outside
# Vault (a log, a core dump, a backup of the worker), so a kv shred proves the key is gone
# from Vault, not that no copy survives. Prefer transit (the default); see the runbook.

# Subject keys: erasure-kv/subjects/<64-hex hash>. A shred deletes the metadata and every
# version.
path "erasure-kv/data/subjects/*" {
  capabilities = ["create", "read", "update"]
}
path "erasure-kv/metadata/subjects/*" {
  capabilities = ["read", "delete"]
}
path "erasure-kv/metadata/subjects" {
  capabilities = ["list"]
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
