"""API v1 for agents that run sagas in their own process: ask for decisions, wait for them.

(Owned by the SDK-gate work: see docs/api.md, "Decisions".)
"""

from __future__ import annotations

from ninja import Router

router = Router(tags=["decisions"])
