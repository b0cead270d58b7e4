"""Normalisation and the keyed hash (`erasure.pseudonym`)."""

from __future__ import annotations

from erasure.pseudonym import normalise
from tests.unit.registry.support import CANARY, CANARY_NORMALISED


def test_email_normalisation_matches_the_pseudonym_module() -> None:
    assert normalise("email", CANARY) == CANARY_NORMALISED
