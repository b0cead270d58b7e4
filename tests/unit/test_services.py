"""LazyServices: what a long-lived reader (the API server) builds on first use, and keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from erasure.config import Settings
from erasure.errors import ConfigError, StoreError
from erasure.services import LazyServices
from erasure.store.database import Store


def test_nothing_is_built_before_it_is_asked_for_and_the_store_is_kept(tmp_path: Path) -> None:
    services = LazyServices(Settings.model_construct(store_url=f"sqlite:///{tmp_path}/s.db"))
    assert not (tmp_path / "s.db").exists()
    store = services.store()
    assert services.store() is store
    assert services.requests().list() == []
    services.close()


def test_a_failed_build_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from erasure import services as module

    real, calls = module.open_store, []

    def down_once(url: str) -> Store:
        calls.append(url)
        if len(calls) == 1:
            raise StoreError("the store is down")
        return real(url)

    monkeypatch.setattr(module, "open_store", down_once)
    services = LazyServices(Settings.model_construct(store_url=f"sqlite:///{tmp_path}/s.db"))
    with pytest.raises(StoreError):
        services.store()
    assert services.store() is services.store()
    assert len(calls) == 2
    services.close()


def test_an_unset_catalog_path_says_which_variable() -> None:
    services = LazyServices(Settings.model_construct(catalog_path=None))
    with pytest.raises(ConfigError, match="ERASURE_CATALOG_PATH is not set"):
        services.catalog()
