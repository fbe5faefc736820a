"""The audit log proves itself: recompute each project's hash chain and name the first break.

Each ``AuditEntry`` is numbered in its project's chain and hashes its content
with the hash before it (``sagaboard.models.records``). Recomputing a chain from
its first entry catches:

* an entry altered in place (its content no longer gives its hash);
* an entry removed from the middle (a gap in the numbers), or re-hashed to hide a
  change (the next entry's ``prev_hash`` no longer matches);
* the newest entries removed (the chain's head says it is longer);
* a row inserted by hand, outside the model (it is in no chain).

It cannot catch someone who rewrites a whole chain *and* its head with the same
code: keep a copy of the heads elsewhere (``sagaboard_verify --audit`` prints them)
to compare against.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.core.cache import cache
from django.utils import timezone

from sagaboard.infra.hash_chain import GENESIS, link_hash
from sagaboard.models import AuditChain, AuditEntry, Project

__all__ = ["AuditBreak", "AuditReport", "ChainState", "chains_checked", "verify_audit"]

_CHUNK = 2000
_CONTENT = ("chain", "seq", "at", "actor", "action", "target", "reason", "data")
FULL_CHECK_SECONDS = 300
"""How long a whole-chain check stands for the audit page: in between, each view checks
only the entries written since, from the last verified point."""


@dataclass(frozen=True)
class AuditBreak:
    """The first place a chain is not what was written."""

    chain: str
    seq: int | None
    entry_id: int | None
    problem: str

    def __str__(self) -> str:
        where = f"entry #{self.entry_id} (seq {self.seq})" if self.entry_id else f"seq {self.seq}"
        return f"audit chain {self.chain}: {where}: {self.problem}"


@dataclass(frozen=True)
class ChainState:
    """One chain as verified: how many entries, and the head hash they lead to."""

    chain: int
    name: str
    entries: int
    head: str
    broken: AuditBreak | None = None
    fully_verified_at: datetime | None = None
    """When every entry of the chain was last recomputed (the audit page's checks)."""


@dataclass
class AuditReport:
    chains: list[ChainState] = field(default_factory=list)
    unlinked: list[AuditBreak] = field(default_factory=list)

    @property
    def breaks(self) -> list[AuditBreak]:
        return [c.broken for c in self.chains if c.broken is not None] + self.unlinked

    @property
    def entries(self) -> int:
        return sum(c.entries for c in self.chains)

    @property
    def ok(self) -> bool:
        return not self.breaks


def verify_audit(project: str | None = None) -> AuditReport:
    """Recompute every chain (or one project's) from its first entry. Read-only."""
    heads = AuditChain.objects.order_by("key")
    unlinked = AuditEntry.objects.filter(chain__isnull=True)
    if project is not None:
        pk = Project.objects.filter(slug=project).values_list("pk", flat=True).first()
        if pk is None:
            raise LookupError(f"no project with the slug {project!r}")
        heads = heads.filter(key=pk)
        unlinked = unlinked.filter(project_id=pk)
    slugs = dict(Project.objects.values_list("pk", "slug"))
    report = AuditReport()
    for head in heads:
        name = "(no project)" if head.key == 0 else slugs.get(head.key, f"(deleted #{head.key})")
        report.chains.append(_verify_chain(head, name))
    for entry_id in unlinked.order_by("pk").values_list("pk", flat=True)[:100]:
        report.unlinked.append(
            AuditBreak(
                "(none)", None, entry_id, "in no chain: written outside sagaboard's audit log"
            )
        )
    return report


def chains_checked(project_pks: Collection[int]) -> list[ChainState]:
    """The chains of these projects (0: the entries of no project), verified for the
    audit page within a page's time.

    A whole chain is recomputed at most every ``FULL_CHECK_SECONDS`` (per cache);
    in between, only the entries after the last verified point, which must still
    follow its hash. A break found is never cached: the next view checks it all again.
    """
    names = {0: "(no project)"}
    names.update(Project.objects.filter(pk__in=project_pks).values_list("pk", "slug"))
    states = []
    for head in AuditChain.objects.filter(key__in=project_pks).order_by("key"):
        key = f"sagaboard:audit-chain:{head.key}"
        known = cache.get(key)
        now = timezone.now()
        if known is not None and (now - known[2]).total_seconds() < FULL_CHECK_SECONDS:
            state = _verify_chain(head, names[head.key], start=(known[0], known[1]))
            checked_at = known[2]
        else:
            state, checked_at = _verify_chain(head, names[head.key]), now
        if state.broken is None:
            cache.set(key, (state.entries, state.head, checked_at), FULL_CHECK_SECONDS)
            state = replace(state, fully_verified_at=checked_at)
        else:
            cache.delete(key)
        states.append(state)
    return states


def _verify_chain(head: AuditChain, name: str, start: tuple[int, str] = (0, GENESIS)) -> ChainState:
    """Recompute the chain after entry ``start[0]`` (whose hash is ``start[1]``)."""
    count, previous = start
    expected = count + 1
    for entry in _entries(head.key, after=count):
        broken = None
        if entry.seq != expected:
            broken = AuditBreak(
                name, expected, None,
                f"missing (the next entry present is #{entry.pk}, seq {entry.seq})",
            )  # fmt: skip
        elif entry.prev_hash != previous:
            broken = AuditBreak(
                name, entry.seq, entry.pk,
                "does not follow the entry before it (its prev_hash differs): re-hashed?",
            )  # fmt: skip
        elif link_hash(previous, entry.content()) != entry.hash:
            broken = AuditBreak(
                name, entry.seq, entry.pk, "altered: its content no longer gives its hash"
            )
        if broken is not None:
            return ChainState(head.key, name, count, previous, broken)
        previous, expected, count = entry.hash, expected + 1, count + 1
    if count != head.seq or previous != head.head:
        missing = AuditBreak(
            name, count + 1, None,
            f"missing: the chain ends at seq {count} but its head says {head.seq} "
            "(the newest entries were removed)",
        )  # fmt: skip
        return ChainState(head.key, name, count, previous, missing)
    return ChainState(head.key, name, count, previous)


def _entries(chain: int, after: int) -> Iterator[AuditEntry]:
    return (
        AuditEntry.objects.filter(chain=chain, seq__gt=after)
        .order_by("seq")
        .only(
            "chain", "seq", "at", "actor", "action", "target", "reason", "data", "prev_hash", "hash"
        )
        .iterator(chunk_size=_CHUNK)
    )
