"""The envelope key cache: bounded LRU, time-to-live, eviction at shred."""

from __future__ import annotations

import os
import time

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from erasure.keys.envelope import KeyCache


def _key() -> AESGCM:
    return AESGCM(os.urandom(32))


def test_least_recently_used_subject_goes_first() -> None:
    cache = KeyCache(max_subjects=2, ttl_seconds=60)
    a, b, c = _key(), _key(), _key()
    cache.put("a", a, b"", sealing=True)
    cache.put("b", b, b"", sealing=True)
    assert cache.sealing_key("a") == (a, b"")  # touches a: b is now the oldest
    cache.put("c", c, b"", sealing=True)
    assert "a" in cache and "c" in cache and "b" not in cache
    assert len(cache) == 2


def test_entries_expire() -> None:
    cache = KeyCache(max_subjects=10, ttl_seconds=0.05)
    cache.put("a", _key(), b"", sealing=True)
    assert "a" in cache
    time.sleep(0.08)
    assert cache.sealing_key("a") is None and "a" not in cache


def test_evict_forgets_every_key_of_the_subject() -> None:
    cache = KeyCache(max_subjects=10, ttl_seconds=60)
    cache.put("a", _key(), b"w1", sealing=True)
    cache.put("a", _key(), b"w2", sealing=False)
    cache.evict("a")
    assert cache.sealing_key("a") is None
    assert cache.opening_key("a", b"w1") is None and cache.opening_key("a", b"w2") is None


def test_opening_keys_are_found_by_wrapped_form() -> None:
    cache = KeyCache(max_subjects=10, ttl_seconds=60)
    k1, k2 = _key(), _key()
    cache.put("a", k1, b"w1", sealing=True)
    cache.put("a", k2, b"w2", sealing=False)
    assert cache.opening_key("a", b"w1") is k1
    assert cache.opening_key("a", b"w2") is k2
    assert cache.sealing_key("a") == (k1, b"w1")  # decrypting does not change the sealing key


def test_size_zero_disables_caching() -> None:
    cache = KeyCache(max_subjects=0, ttl_seconds=60)
    cache.put("a", _key(), b"", sealing=True)
    assert len(cache) == 0


def test_negative_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        KeyCache(max_subjects=-1, ttl_seconds=1)
