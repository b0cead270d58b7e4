"""Per-subject keys in Vault/OpenBao and crypto-shredding.

vault.py (client, embedded OpenBao, mounts, errors) · kinds.py (the key-store family: its
config base and registry) · keystore.py (kv and transit backends, shred with proof) · blob.py
(the sealed-record format) · envelope.py (encrypt/decrypt with a key cache) · pepper.py (the
versioned HMAC pepper; never shredded).
"""
