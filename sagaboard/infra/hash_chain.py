"""A hash chain: each record's hash covers its content and the hash before it.

Altering, removing or reordering any record changes every hash after it, so a
verifier that recomputes the chain from the first record names the first record
that is not what was written. The content is hashed in one canonical form (JSON,
sorted keys, no spaces, UTF-8), so the same record always gives the same hash on
any database and machine.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

GENESIS = "0" * 64
"""The hash before the first record of every chain."""


def canonical_time(at: datetime) -> str:
    """UTC, to the microsecond: what both databases store and give back."""
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def link_hash(previous: str, content: Mapping[str, Any]) -> str:
    """The hash of one record: SHA-256 of the previous hash and the canonical content."""
    text = json.dumps(
        content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(f"{previous}\n{text}".encode()).hexdigest()
