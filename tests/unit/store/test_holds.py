"""Holds on a SQLite store's file, on Postgres and with no store: one holder at a time, a
waiter gets the hold once it is released, gives up after its wait, and a dead holder's hold
is released with its process."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from erasure.store import Store, open_store
from erasure.store.holds import hold


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
    else:
        url = f"sqlite:///{tmp_path / 'erasure.db'}"
    with open_store(url) as opened:
        yield opened


def _elsewhere(store: Store | None, name: str, wait: float) -> tuple[bool, float]:
    """Take `name` in another thread (a worker of its own): whether it got it, how long."""
    result: list[tuple[bool, float]] = []

    def take() -> None:
        started = time.monotonic()
        with hold(store, name, wait=wait) as held:
            result.append((held, time.monotonic() - started))

    thread = threading.Thread(target=take)
    thread.start()
    thread.join()
    return result[0]


def test_a_second_taker_gives_up_after_its_wait(store: Store) -> None:
    with hold(store, "t") as first:
        second, waited = _elsewhere(store, "t", 0.6)
        other, _ = _elsewhere(store, "another name", 0)
        with hold(store, "t") as nested:  # this thread holds it: tried once, not free
            assert not nested
        with pytest.raises(RuntimeError, match="would wait for itself"), hold(store, "t", wait=5):
            pass
    assert first and not second and other
    assert waited >= 0.6
    with hold(store, "t") as again:  # released at the end of the first block
        assert again


def test_a_waiter_takes_the_hold_once_the_holder_releases_it(store: Store) -> None:
    order: list[str] = []
    taken = threading.Event()

    def holder() -> None:
        with hold(store, "t") as held:
            assert held
            taken.set()
            time.sleep(0.5)
            order.append("holder done")

    thread = threading.Thread(target=holder)
    thread.start()
    taken.wait(5)
    with hold(store, "t", wait=10) as held:
        order.append(f"waiter held={held}")
    thread.join()
    assert order == ["holder done", "waiter held=True"]


def test_with_no_store_the_hold_is_this_process_s() -> None:
    with hold(None, "t") as first:
        assert first and not _elsewhere(None, "t", 0.2)[0]
    with hold(None, "t") as again:
        assert again


def _hold_and_die(url: str, ready: multiprocessing.synchronize.Event) -> None:
    store = open_store(url)
    with hold(store, "t") as held:
        assert held
        ready.set()
        time.sleep(60)  # killed long before


def test_a_killed_holder_s_hold_is_released_with_its_process(store: Store) -> None:
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    child = context.Process(target=_hold_and_die, args=(str(store.engine.url), ready))
    child.start()
    try:
        assert ready.wait(60)
        with hold(store, "t") as while_alive:
            assert not while_alive
        child.kill()
        child.join(10)
        with hold(store, "t", wait=10) as after:
            assert after
    finally:
        child.kill()
        child.join()
