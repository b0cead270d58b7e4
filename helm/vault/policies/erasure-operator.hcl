# erasure-operator: a person (or the bootstrap job) that sets the erasure mounts and long-lived
# keys up (`erasure keys init`) and rotates the pepper (`erasure keys rotate-pepper`). It holds
# no subject key, signs nothing, opens no submission and cannot erase the chain-head anchor's
# history: it may only set the anchor's max_versions to the value `keys init` uses.

# The two mounts: see, enable and tune them.
path "sys/mounts" {
  capabilities = ["read"]
}
path "sys/mounts/erasure-kv" {
  capabilities = ["create", "read", "update"]
}
path "sys/mounts/erasure-kv/tune" {
  capabilities = ["read", "update"]
}
path "sys/mounts/erasure-transit" {
  capabilities = ["create", "read", "update"]
}
path "sys/mounts/erasure-transit/tune" {
  capabilities = ["read", "update"]
}

# The pepper: create version 1, add versions (rotate), raise max_versions. Never delete or
# destroy a version: every tombstone hashed under it would stop matching. The denies win over
# any broader policy the same identity may hold.
path "erasure-kv/data/pepper" {
  capabilities = ["create", "read", "update"]
}
path "erasure-kv/metadata/pepper" {
  capabilities = ["create", "read", "update"]
}
path "erasure-kv/delete/pepper" {
  capabilities = ["deny"]
}
path "erasure-kv/destroy/pepper" {
  capabilities = ["deny"]
}

# The long-lived transit keys: the records' signing key and the submissions key.
path "erasure-transit/keys/completion-records" {
  capabilities = ["create", "read", "update"]
}
path "erasure-transit/keys/completion-records/rotate" {
  capabilities = ["update"]
}
path "erasure-transit/keys/submissions" {
  capabilities = ["create", "read", "update"]
}
path "erasure-transit/keys/submissions/rotate" {
  capabilities = ["update"]
}

# The names of per-subject keys (keyed hashes, never identifiers), listed only: `keys init`
# refuses to create a pepper while keys named under a lost one exist (it would orphan them).
path "erasure-kv/metadata/subjects" {
  capabilities = ["list"]
}
path "erasure-transit/keys" {
  capabilities = ["list"]
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
