# erasure-api: the Airflow API server running the erasure plugin. It seals what the DPO
# submits (encrypt only: it cannot open a submission again) and reads the public keys that
# check the completion records' signatures and the chain heads published outside the store
# (the records page verifies against them). No other KV access, no signing, no subject keys.

path "erasure-transit/encrypt/submissions" {
  capabilities = ["update"]
}
path "erasure-transit/keys/completion-records" {
  capabilities = ["read"]
}
path "erasure-kv/data/anchors/chain-head/*" {
  capabilities = ["read"]
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
