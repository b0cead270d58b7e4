"""The erasure store opens, migrates itself, and says clearly when it cannot."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from erasure.errors import StoreError
from erasure.store import head_revision, metadata, open_store, suppression_list
from erasure.store.database import _revision_names, alembic_config


def test_open_creates_the_file_and_its_directory_and_migrates_to_head(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/var/erasure.db"
    with open_store(url) as store:
        assert store.revision() == head_revision()
        assert "suppression_list" in sa.inspect(store.engine).get_table_names()
    assert (tmp_path / "var" / "erasure.db").exists()


def test_reopening_a_migrated_store_is_a_no_op(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/erasure.db"
    open_store(url).close()
    with open_store(url) as store:
        assert store.revision() == head_revision()


def test_in_memory_store_keeps_its_tables_across_connections() -> None:
    with open_store("sqlite://") as store, store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(suppression_list)).scalar() == 0


def test_migrations_match_the_table_definitions(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as store, store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == [], "schema.py and migrations/versions disagree: add a revision"


def test_revisions_form_one_line() -> None:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    assert len(heads) == 1, f"several migration heads {heads}: merge them (alembic merge)"


def test_the_head_is_alembics_head() -> None:
    # head_revision reads the revision lines itself, so that opening a store skips Alembic.
    assert head_revision() == ScriptDirectory.from_config(alembic_config()).get_current_head()


def test_revision_lines_are_read_as_alembic_reads_them(tmp_path: Path) -> None:
    merge = tmp_path / "merge.py"
    merge.write_text(
        '"""Merge."""\nrevision: str = "c3"  # the merge\n'
        "down_revision: str | Sequence[str] | None = (\n"
        '    "a1_a_long_revision_name",\n    "b2_another_long_revision_name",\n)\n'
    )
    found = _revision_names(merge)
    assert found == {
        "revision": "c3",
        "down_revision": ("a1_a_long_revision_name", "b2_another_long_revision_name"),
    }
    named = tmp_path / "named.py"
    named.write_text('PARENT = "a1"\nrevision = "b2"\ndown_revision = PARENT\n')
    with pytest.raises(StoreError, match="must be literal strings"):
        _revision_names(named)


def test_the_revision_is_alembics_revision(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path}/erasure.db", migrate=False) as store:
        with store.engine.connect() as conn:
            assert store.revision() is MigrationContext.configure(conn).get_current_revision()
        store.engine.dispose()
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as store, store.engine.connect() as conn:
        assert store.revision() == MigrationContext.configure(conn).get_current_revision()


def test_unreachable_postgres_raises_store_error_without_the_password() -> None:
    with pytest.raises(StoreError, match="cannot reach the erasure store") as info:
        open_store("postgresql://erasure:s3cret@127.0.0.1:1/erasure")
    assert "s3cret" not in str(info.value)
    assert "127.0.0.1" in str(info.value)


def test_unparseable_url_raises_store_error() -> None:
    with pytest.raises(StoreError, match="cannot be parsed"):
        open_store("not a url")


def test_unknown_driver_raises_store_error() -> None:
    with pytest.raises(StoreError, match="dialect and driver"):
        open_store("nosuchdb://host/db")


def test_the_database_refuses_anything_but_a_hex_hash(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as store:
        row = {
            "subject_hash": "jane.doe@example.com",
            "pepper_version": 1,
            "identifier_type": "email",
            "created_at": datetime.now(UTC),
        }
        with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
            conn.execute(suppression_list.insert().values(**row))


def test_timestamps_come_back_as_aware_utc(tmp_path: Path) -> None:
    written = datetime(2025, 3, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as store:
        with store.engine.begin() as conn:
            conn.execute(
                suppression_list.insert().values(
                    subject_hash="a" * 64,
                    pepper_version=1,
                    identifier_type="email",
                    created_at=written,
                )
            )
        with store.engine.connect() as conn:
            read = conn.execute(sa.select(suppression_list.c.created_at)).scalar_one()
    assert read == written
    assert read.tzinfo == UTC


def test_naive_timestamps_are_refused(tmp_path: Path) -> None:
    naive = suppression_list.insert().values(
        subject_hash="a" * 64,
        pepper_version=1,
        identifier_type="email",
        created_at=datetime(2025, 3, 1),
    )
    with (
        open_store(f"sqlite:///{tmp_path}/erasure.db") as store,
        pytest.raises(sa.exc.StatementError, match="naive datetime"),
        store.engine.begin() as conn,
    ):
        conn.execute(naive)


@pytest.mark.parametrize("round_", range(3))
def test_processes_opening_a_new_sqlite_store_at_once_migrate_it_in_turn(
    tmp_path: Path, round_: int
) -> None:
    """`make up`'s scheduler, API server and triggerer open the new store at once: each waits
    for the file lock beside it, and the later ones find it migrated."""
    url = f"sqlite:///{tmp_path}/fresh-{round_}.db"
    code = "import sys; from erasure.store import open_store; open_store(sys.argv[1]).close()"
    workers = [
        subprocess.Popen([sys.executable, "-c", code, url], stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    errors = [w.communicate(timeout=120)[1].decode() for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0], errors
    with open_store(url) as store:
        assert store.revision() == head_revision()
