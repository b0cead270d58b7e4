# erasure-worker: the tasks of gdpr_erasure and of the rebuild (rematerialisation) DAGs.
# Creates, reads and destroys per-subject keys, reads the pepper, signs completion records,
# unseals the DPO's submissions. It never writes the pepper and never encrypts a submission.

# Every task checks at start that its mounts exist (erasure.services.Services.open).
path "sys/mounts" {
  capabilities = ["read"]
}

# Subject keys, ERASURE_KEYSTORE_KIND=kv (the default): erasure-kv/subjects/<64-hex hash>,
# request-scoped keys included. A shred deletes the metadata and every version.
path "erasure-kv/data/subjects/*" {
  capabilities = ["create", "read", "update"]
}
path "erasure-kv/metadata/subjects/*" {
  capabilities = ["read", "delete"]
}
path "erasure-kv/metadata/subjects" {
  capabilities = ["list"]
}

# Subject keys, ERASURE_KEYSTORE_KIND=transit: erasure-transit/keys/subject-<hash>. A shred
# allows deletion (config), then deletes the key.
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

# Completion records: sign with the non-exportable ed25519 key, read its public keys.
path "erasure-transit/sign/completion-records" {
  capabilities = ["update"]
}
path "erasure-transit/keys/completion-records" {
  capabilities = ["read"]
}

# The DPO's submissions were sealed by the API server; only the worker opens them.
path "erasure-transit/decrypt/submissions" {
  capabilities = ["update"]
}
