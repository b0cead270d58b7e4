# erasure-signer: the only identity that signs completion records, used by the ledger's
# append path alone (ERASURE_VAULT_SIGNER_* settings). It also publishes the chain head after
# each append, one secret per head under erasure-kv/anchors/chain-head/, where the store's
# owner cannot rewrite it. It reads no subject key, no pepper and no submission.

path "erasure-transit/sign/completion-records" {
  capabilities = ["update"]
}
path "erasure-transit/keys/completion-records" {
  capabilities = ["read"]
}

# The published heads: create one per append and read them, never write one again (no
# `update`: a head published stays as it was published), list them.
path "erasure-kv/data/anchors/chain-head/*" {
  capabilities = ["create", "read"]
}
path "erasure-kv/metadata/anchors/chain-head/" {
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
