# erasure-signer: the only identity that signs completion records, used by the ledger's
# append path alone (ERASURE_VAULT_SIGNER_* settings). It also publishes the chain head to
# the anchor erasure-kv/anchors/chain-head after each append, where the store's owner cannot
# rewrite it. It reads no subject key, no pepper and no submission.

path "erasure-transit/sign/completion-records" {
  capabilities = ["update"]
}
path "erasure-transit/keys/completion-records" {
  capabilities = ["read"]
}

# The chain-head anchor: write new versions, read them. Every version is kept (max_versions
# is set by `erasure keys init`, which only the operator may change).
path "erasure-kv/data/anchors/chain-head" {
  capabilities = ["create", "update", "read"]
}
path "erasure-kv/metadata/anchors/chain-head" {
  capabilities = ["read"]
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
