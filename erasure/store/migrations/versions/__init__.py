"""Store revisions, one file each; `alembic revision -m "..."` at the repo root adds one."""
