"""Per-subject key throughput against an embedded OpenBao, and envelope encryption speed.

For each backend (kv, transit): create then shred (with its proof) the keys of
ERASURE_BENCH_SUBJECTS subjects (default 10,000) from a small thread pool, printing ops/s and
the server's resident memory (VmRSS) before, after creating and after shredding.

Envelope encryption of 1 KiB and 64 KiB records (cached key, as a producer runs) is compared
with a baseline of bare `AESGCM.encrypt`/`decrypt` with a random nonce on the same data in the
same run; the ratio is envelope / baseline throughput.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from erasure.keys.envelope import EnvelopeCipher
from erasure.keys.keystore import SubjectKeyStore, keystore_from_config
from erasure.keys.vault import EmbeddedOpenBao

SUBJECTS = int(os.environ.get("ERASURE_BENCH_SUBJECTS", "10000"))
THREADS = 8
ENVELOPE_BYTES = 32 * 1024 * 1024  # per record size and repeat
REPEATS = 3


def _rss_mib(pid: int | None) -> float:
    """Resident memory of a process from /proc (Linux); NaN where unavailable."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _subjects(n: int, salt: str) -> list[str]:
    return [hashlib.sha256(f"{salt}:{i}".encode()).hexdigest() for i in range(n)]


def _timed(pool: ThreadPoolExecutor, fn: Callable[[str], object], items: list[str]) -> float:
    start = time.perf_counter()
    for _ in pool.map(fn, items):
        pass
    return time.perf_counter() - start


def bench_keystore(server: EmbeddedOpenBao, kind: str) -> None:
    client = server.client(timeout=30)
    store: SubjectKeyStore = keystore_from_config({"kind": kind, "mount": f"bench-{kind}"}, client)
    store.ensure_mount()
    subjects = _subjects(SUBJECTS, kind)
    rss_before = _rss_mib(server.pid)
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        created = _timed(pool, store.create, subjects)
        rss_created = _rss_mib(server.pid)
        shredded = _timed(pool, store.shred, subjects)
    rss_shredded = _rss_mib(server.pid)
    assert not any(store.exists(s) for s in subjects[:: max(1, SUBJECTS // 100)])
    n = len(subjects)
    print(
        f"{kind:8s} create {n / created:8.0f} keys/s   shred+proof {n / shredded:7.0f} keys/s   "
        f"({n} subjects, {THREADS} threads)"
    )
    print(
        f"{'':8s} server RSS {rss_before:6.1f} MiB before, {rss_created:6.1f} after create, "
        f"{rss_shredded:6.1f} after shred"
    )


def _best(fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_envelope(server: EmbeddedOpenBao) -> None:
    client = server.client(timeout=30)
    store = keystore_from_config({"kind": "kv", "mount": "bench-kv"}, client)
    subject = _subjects(1, "envelope")[0]
    store.create(subject)
    cipher = EnvelopeCipher(store)
    aead = AESGCM(store.get(subject).material)  # the same key, without the envelope around it
    for size in (1024, 64 * 1024):
        _envelope_at(cipher, aead, subject, size)


def _envelope_at(cipher: EnvelopeCipher, aead: AESGCM, subject: str, size: int) -> None:
    dataset = "lake.events"
    count = ENVELOPE_BYTES // size
    distinct = [os.urandom(size) for _ in range(min(count, 256))]
    batch = [distinct[i % len(distinct)] for i in range(count)]
    mib = count * size / (1024 * 1024)

    def baseline_encrypt() -> list[tuple[bytes, bytes]]:
        out = []
        for record in batch:
            nonce = os.urandom(12)
            out.append((nonce, aead.encrypt(nonce, record, None)))
        return out

    def envelope_encrypt() -> list[bytes]:
        return [cipher.encrypt(subject, dataset, record) for record in batch]

    raw = baseline_encrypt()
    sealed = envelope_encrypt()
    timings = {
        "encrypt": (_best(envelope_encrypt), _best(baseline_encrypt)),
        "decrypt": (
            _best(lambda: [cipher.decrypt(subject, dataset, b) for b in sealed]),
            _best(lambda: [aead.decrypt(n, c, None) for n, c in raw]),
        ),
    }
    label = f"{size // 1024} KiB"
    for op, (t_env, t_base) in timings.items():
        print(
            f"envelope {op} {label:>6s}: {mib / t_env:7.0f} MiB/s   "
            f"baseline AESGCM {mib / t_base:7.0f} MiB/s   ratio {t_base / t_env:.2f}"
        )
    print(f"{'':8s} blob overhead {len(sealed[0]) - size} bytes per {label} record (kv)")


def main() -> None:
    with EmbeddedOpenBao() as server:
        print(f"OpenBao dev server pid {server.pid} at {server.address}")
        for kind in ("kv", "transit"):
            bench_keystore(server, kind)
        bench_envelope(server)


if __name__ == "__main__":
    main()
