"""Alembic environment and revisions of the erasure store (run by `erasure.store.open_store`)."""
