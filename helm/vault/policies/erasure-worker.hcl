# erasure-worker: the tasks of gdpr_erasure, erasure_reconcile and gdpr_erasure_extend, on
# their own Celery queue (`erasure`) and service account. Creates, uses and destroys
# per-subject keys in transit (the default key store: the keys are non-exportable, so a
# destroyed key has no copy outside Vault), reads the pepper, unseals the DPO's submissions.
# It signs nothing (completion records are signed by the erasure-signer identity), never
# writes the pepper, never encrypts a submission and reads no KV subject key: a deployment
# that chooses ERASURE_KEYSTORE_KIND=kv attaches erasure-worker-kv.hcl as well.

# Every task checks at start that its mounts exist (erasure.services.Services.open).
path "sys/mounts" {
  capabilities = ["read"]
}

# Subject keys (request-scoped keys included): erasure-transit/keys/subject-<64-hex hash>.
# A shred allows deletion (config), then deletes the key.
path "erasure-transit/keys/subject-*" {
  capabilities = ["create", "read", "update", "delete"]
}
path "erasure-transit/datakey/plaintext/subject-*" {
  capabilities = ["update"]
}
path "erasure-transit/decrypt/subject-*" {
  capabilities = ["update"]
}

# The pepper: read every version (tombstones hashed under each must still match).
path "erasure-kv/data/pepper" {
  capabilities = ["read"]
}
path "erasure-kv/metadata/pepper" {
  capabilities = ["read"]
}

# The records' public keys (a completed request's chain is checked before citing it).
path "erasure-transit/keys/completion-records" {
  capabilities = ["read"]
}

# The DPO's submissions were sealed by the API server; only the worker opens them.
path "erasure-transit/decrypt/submissions" {
  capabilities = ["update"]
}

# Transit keys never leave Vault: no export, no backup, whatever else the identity holds.
path "erasure-transit/export/*" {
  capabilities = ["deny"]
}
path "erasure-transit/backup/*" {
  capabilities = ["deny"]
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
