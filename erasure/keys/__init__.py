"""Per-subject keys in Vault/OpenBao and crypto-shredding.

vault.py (client, embedded OpenBao, mounts, errors) · keystore.py (kv and transit backends,
shred with proof; their configs and the key-store family are in erasure.config) · blob.py
(the sealed-record format) · envelope.py (encrypt/decrypt with a key cache) · pepper.py (the
versioned HMAC pepper; never shredded).
"""
