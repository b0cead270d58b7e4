# erasure-auditor: an auditor's own Vault identity. Reads the published chain heads (every
# one, to compare with the store's chain) and the public keys that check the records'
# signatures. Nothing else: no key material, no pepper, no submission.

path "erasure-kv/data/anchors/chain-head/*" {
  capabilities = ["read"]
}
path "erasure-kv/metadata/anchors/chain-head/" {
  capabilities = ["list"]
}
path "erasure-transit/keys/completion-records" {
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
