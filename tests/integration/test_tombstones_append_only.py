"""Tombstones, like completion records, only grow: the store refuses to change or remove one,
on SQLite and on Postgres, whoever asks. Re-adding one (a retried step) still succeeds."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from erasure.pseudonym import Pepper
from erasure.store import Store, suppression_list
from erasure.suppression import SuppressionList, Tombstone

pytestmark = [pytest.mark.integration]

V1 = Pepper(version=1, secret=b"\x11" * 32)
V2 = Pepper(version=2, secret=b"\x22" * 32)


def stone(pepper: Pepper = V1) -> Tombstone:
    return Tombstone.for_subject(pepper, "email", "gone@example.com", request_ref="REQ-1")


@pytest.mark.parametrize(
    "statement",
    [
        sa.update(suppression_list).values(pepper_version=9),
        sa.update(suppression_list).values(subject_hash="0" * 64),
        sa.delete(suppression_list),
        sa.delete(suppression_list).where(suppression_list.c.request_ref == "REQ-1"),
    ],
    ids=["update-version", "update-hash", "delete-all", "delete-one"],
)
def test_a_tombstone_cannot_be_changed_or_removed(store: Store, statement: sa.Executable) -> None:
    tombstones = SuppressionList(store)
    assert tombstones.add(stone())
    with (
        pytest.raises(sa.exc.DatabaseError, match="suppression_list is append-only"),
        store.engine.begin() as conn,
    ):
        conn.execute(statement)
    assert tombstones.contains(stone().subject_hash, 1)
    assert tombstones.count() == 1


def test_a_retried_tombstone_and_a_new_pepper_version_still_add(store: Store) -> None:
    tombstones = SuppressionList(store)
    assert tombstones.add(stone())
    assert not tombstones.add(stone())  # a retried step: already there, nothing changes
    assert tombstones.add(stone(V2))  # a rotation: the subject under the new version too
    assert tombstones.hashes_by_version() == {
        1: {stone(V1).subject_hash},
        2: {stone(V2).subject_hash},
    }


@pytest.mark.postgres
def test_truncate_is_refused_on_postgres(postgres_schema_url: str) -> None:
    from erasure.store import open_store

    with open_store(postgres_schema_url) as store:
        SuppressionList(store).add(stone())
        with (
            pytest.raises(sa.exc.DatabaseError, match="append-only: TRUNCATE refused"),
            store.engine.begin() as conn,
        ):
            conn.execute(sa.text("TRUNCATE suppression_list"))
        assert SuppressionList(store).count() == 1
