# erasure-api: the Airflow API server running the erasure plugin. It seals what the DPO
# submits (encrypt only: it cannot open a submission again) and reads the public keys that
# check the completion records' signatures. No KV access, no signing, no subject keys.

path "erasure-transit/encrypt/submissions" {
  capabilities = ["update"]
}
path "erasure-transit/keys/completion-records" {
  capabilities = ["read"]
}
