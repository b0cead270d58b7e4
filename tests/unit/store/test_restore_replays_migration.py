"""Revision a9e3_restore_replays: the ledger stays append-only whatever becomes of the migration.

SQLite copies `completion_records` to widen its kind check, so its append-only triggers are
dropped and created again around the copy: a failure part way, a refused downgrade, or a run
that died under an earlier version of the revision must each leave them there (UPDATE and
DELETE on the records refused). Real SQLite files and a real Postgres schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.util import CommandError

from erasure.audit.records import RecordKind, RecordLedger
from erasure.errors import StoreError
from erasure.store import Store, head_revision, metadata, open_store
from erasure.store.database import alembic_config, upgrade
from tests.unit.audit.support import LocalSigner, received_body

BEFORE = "f6b9_sealed_notes"
REVISION = "a9e3_restore_replays"
NO_SUBJECT = "0" * 64
SQLITE_TRIGGERS = {
    "completion_records_no_update",
    "completion_records_no_delete",
    "completion_records_extend_head",
    "completion_chain_head_forward_only",
}
PG_TRIGGERS = {"completion_records_append_only", "completion_records_extend_head"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store migrated to the revision before this one, holding one record."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/erasure.db"
    else:
        url = request.getfixturevalue("postgres_schema_url")
    with open_store(url, migrate=False) as opened:
        upgrade(opened, BEFORE)
        RecordLedger(opened, LocalSigner()).append(
            "REQ-1", "a" * 64, RecordKind.RECEIVED, received_body("REQ-1")
        )
        yield opened


def triggers(store: Store) -> set[str]:
    query = (
        "SELECT name FROM sqlite_master WHERE type = 'trigger'"
        if store.dialect == "sqlite"
        else "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
    )
    with store.engine.connect() as conn:
        return set(conn.execute(sa.text(query)).scalars())


def assert_append_only(store: Store) -> None:
    """The triggers are there, and the database refuses to change or delete a record."""
    assert (SQLITE_TRIGGERS if store.dialect == "sqlite" else PG_TRIGGERS) <= triggers(store)
    for statement in ("UPDATE completion_records SET body = 'x'", "DELETE FROM completion_records"):
        with pytest.raises(sa.exc.DBAPIError, match="append-only"), store.engine.begin() as conn:
            conn.execute(sa.text(statement))


def downgrade(store: Store, revision: str) -> None:
    """As `erasure.store.database.upgrade` runs an upgrade: one connection, one transaction."""
    with store.engine.begin() as conn:
        config = alembic_config()
        config.attributes["connection"] = conn
        command.downgrade(config, revision)


def tables(store: Store) -> set[str]:
    return set(sa.inspect(store.engine).get_table_names())


def test_the_ledger_is_append_only_after_the_upgrade(store: Store) -> None:
    upgrade(store, REVISION)
    assert_append_only(store)
    upgrade(store)
    assert store.revision() == head_revision()
    assert_append_only(store)


def test_a_downgrade_is_refused_while_a_replay_is_on_record_and_nothing_is_dropped(
    store: Store,
) -> None:
    upgrade(store)
    RecordLedger(store, LocalSigner()).append(
        "REPLAY-20261205T090000-abc123", NO_SUBJECT, RecordKind.REPLAYED, {"rows_erased": 0}
    )

    with pytest.raises(CommandError, match="1 replayed record"):
        downgrade(store, BEFORE)

    assert store.revision() == head_revision()
    assert {"restore_replays", "pending_vacuums"} <= tables(store)  # the later revision's too
    assert_append_only(store)
    assert [r.kind for r in RecordLedger(store).list()] == [
        RecordKind.RECEIVED,
        RecordKind.REPLAYED,
    ]


def test_a_downgrade_without_replays_restores_the_triggers(store: Store) -> None:
    upgrade(store)
    downgrade(store, BEFORE)
    assert store.revision() == BEFORE and "restore_replays" not in tables(store)
    assert_append_only(store)


def test_an_upgrade_that_fails_part_way_leaves_the_ledger_as_it_was(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/erasure.db"
    with open_store(url, migrate=False) as store:
        upgrade(store, BEFORE)
        RecordLedger(store, LocalSigner()).append(
            "REQ-1", "a" * 64, RecordKind.RECEIVED, received_body("REQ-1")
        )
        # Something in the way of the table copy, after the triggers were dropped for it.
        with store.engine.begin() as conn:
            conn.execute(sa.text("CREATE VIEW _alembic_tmp_completion_records AS SELECT 1 AS x"))

        with pytest.raises(StoreError, match="cannot migrate"):
            upgrade(store)

        assert store.revision() == BEFORE
        assert "restore_replays" not in tables(store)  # rolled back with the rest
        assert_append_only(store)
        with store.engine.begin() as conn:
            conn.execute(sa.text("DROP VIEW _alembic_tmp_completion_records"))
        upgrade(store)
        assert store.revision() == head_revision()
        assert_append_only(store)


def test_an_upgrade_that_died_under_the_earlier_revision_is_finished_by_running_it_again(
    tmp_path: Path,
) -> None:
    """What the revision's first version left when it died in the copy: its log table made,
    the triggers dropped (each committed on its own), the copy's table half made."""
    url = f"sqlite:///{tmp_path}/erasure.db"
    with open_store(url, migrate=False) as store:
        upgrade(store, BEFORE)
        RecordLedger(store, LocalSigner()).append(
            "REQ-1", "a" * 64, RecordKind.RECEIVED, received_body("REQ-1")
        )
        with store.engine.begin() as conn:
            metadata.tables["restore_replays"].create(conn)
            for name in SQLITE_TRIGGERS:
                conn.execute(sa.text(f"DROP TRIGGER {name}"))
            conn.execute(sa.text("CREATE TABLE _alembic_tmp_completion_records (seq BIGINT)"))

        upgrade(store)

        assert store.revision() == head_revision()
        assert "_alembic_tmp_completion_records" not in tables(store)
        assert_append_only(store)
        assert len(RecordLedger(store).list()) == 1


def test_the_schema_declares_the_status_check_the_revision_creates(store: Store) -> None:
    upgrade(store)
    declared = {
        c.name
        for c in metadata.tables["restore_replays"].constraints
        if isinstance(c, sa.CheckConstraint)
    }
    created = {c["name"] for c in sa.inspect(store.engine).get_check_constraints("restore_replays")}
    assert declared == created == {"ck_restore_replays_status"}
    row = {
        "replay_ref": "REPLAY-1",
        "dataset_namespace": "warehouse",
        "dataset_name": "crm.customers",
        "status": "done",
        "evidence_json": "{}",
        "started_at": sa.func.now(),
        "updated_at": sa.func.now(),
    }
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(metadata.tables["restore_replays"].insert().values(**row))
