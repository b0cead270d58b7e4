"""The request registry: the workflow's persistent, resumable state in the erasure store.

One idea per module: `requests` (the requests and their status machine), `secrets` (the
parked identifier, sealed under a request-scoped key in Vault), `plans` (the plan each
request acts on and its re-plans), `action_log` (what each action did, so a retry does not
act twice), and `registration` (recording a new request with its parked secret at once).
The plugin reads requests, plans and the action log and holds no key.
"""
