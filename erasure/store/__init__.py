"""The erasure store: its own database (SQLite embedded, Postgres in production).

`open_store(url)` connects and migrates to the newest schema; tables are in `schema`.
"""

from __future__ import annotations

from erasure.store.database import Store, head_revision, open_store, store_errors, upgrade
from erasure.store.schema import metadata, suppression_list

__all__ = [
    "Store",
    "head_revision",
    "metadata",
    "open_store",
    "store_errors",
    "suppression_list",
    "upgrade",
]
