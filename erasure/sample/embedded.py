"""The embedded default: the demo estate on SQLite, its keys in a local OpenBao.

`open_demo` builds everything a run needs in one folder and returns the settings that point
at it, so the CLI demo, the DAG under `dag.test()` and the tests share one setup.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from erasure.config import Settings
from erasure.keys.envelope import EnvelopeCipher
from erasure.keys.keystore import keystore_from_settings
from erasure.keys.pepper import PepperStore
from erasure.keys.vault import EmbeddedOpenBao, connect
from erasure.provision import initialise
from erasure.pseudonym import normalise, subject_hash
from erasure.sample.seed import CRM_EXPORT, build_demo

ARCHIVE = "archive.customer_events"


def anchor_path_for(where: Path | str) -> str:
    """The published chain head of the store at `where`: one store, one head, so demos (and
    tests) sharing an OpenBao keep theirs apart."""
    return f"anchors/demo-{hashlib.sha256(str(where).encode()).hexdigest()[:16]}"


def demo_settings(base_dir: Path, bao: EmbeddedOpenBao) -> Settings:
    """Settings for the demo in `base_dir` against the running embedded OpenBao."""
    base = Settings.model_construct(
        catalog_path=base_dir / "catalog.yaml",
        store_url=f"sqlite:///{base_dir / 'erasure.db'}",
        airflow_access="inprocess",
        crm_export=base_dir / CRM_EXPORT,
        # dag.test has no auth manager to tell the answering user's roles.
        require_dpo_role=False,
        vault_anchor_path=anchor_path_for(base_dir),
    )
    return Settings(**bao.settings(base).model_dump())


def open_demo(base_dir: Path, bao: EmbeddedOpenBao, *, url: str | None = None) -> Settings:
    """Build the estate in `base_dir`, sealing the archive under per-customer keys."""
    settings = demo_settings(base_dir, bao)
    vault = connect(settings)
    # What the operator's `erasure keys init` does: the mounts, the signing and submissions
    # keys, and pepper v1 (a new estate: nothing is hashed under any pepper yet).
    initialise(vault, settings)
    keystore = keystore_from_settings(settings, vault)
    keystore.ensure_mount()
    pepper = PepperStore(vault, settings.vault_kv_mount).current()
    cipher = EnvelopeCipher(keystore)

    def seal(customer_id: str, dataset: str, plaintext: bytes) -> tuple[str, bytes]:
        hashed = subject_hash(pepper, "customer_id", normalise("strip", customer_id))
        keystore.create(hashed, dataset)
        return hashed, cipher.encrypt(hashed, dataset, plaintext)

    build_demo(base_dir, url=url, encrypt=seal)
    return settings
