"""Completion records auditors can trust: append-only, hash-chained, signed, exportable.

records.py (the ledger: append, list, show, verify) · canonical.py (what a record hash covers)
· chain.py (walking the chain) · evidence.py (the body of a completed record, effective
erasure date) · signing.py (Ed25519 in Vault transit, offline verification) · export.py (JSON
evidence pack and HTML page) · closure_graph.py (the page's SVG) · commands.py (`erasure audit`).
"""
