"""GDPR Article 17 erasure orchestration: lineage closure, decision procedure, proofs."""

from __future__ import annotations

__version__ = "0.1.0"
