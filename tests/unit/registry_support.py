"""The registry's books over one store, as Services wires them, for the registry tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from erasure.catalog import Catalog
from erasure.keys.envelope import EnvelopeCipher
from erasure.keys.pepper import PepperSource
from erasure.locate import normalise_subject
from erasure.registry.action_log import ActionLog
from erasure.registry.plans import PlanBook
from erasure.registry.registration import Registrar
from erasure.registry.requests import Registration, RequestBook
from erasure.registry.secrets import ParkedSecrets
from erasure.store import Store
from erasure.submission import ErasureRequest


@dataclass
class Books:
    store: Store
    requests: RequestBook
    secrets: ParkedSecrets
    plans: PlanBook
    action_log: ActionLog
    registrar: Registrar


def books_for(store: Store, keystore: Any, peppers: PepperSource) -> Books:
    requests = RequestBook(store)
    secrets = ParkedSecrets(store, EnvelopeCipher(keystore), peppers)
    return Books(
        store, requests, secrets, PlanBook(store), ActionLog(store),
        Registrar(store, requests, secrets),
    )  # fmt: skip


def register(books: Books, req: ErasureRequest, *, catalog: Catalog, run_id: str) -> Registration:
    """Register as the workflow's register step does: the identifier normalised first."""
    identity = normalise_subject(catalog, req.subject)
    return books.registrar.register(req, identity, catalog=catalog, run_id=run_id)
