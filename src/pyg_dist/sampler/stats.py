"""Counters of distributed sampling (opt-in: a sampler without a stats object counts nothing).

Example:
    >>> stats = SamplerStats()
    >>> stats.summary()["batches"]
    0
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Set, Tuple

from torch import Tensor


@dataclass
class SamplerStats:
    """Totals over the batches a sampler produced since it was given this object.

    Attributes:
        batches: Batches sampled.
        hop_seeds_local / hop_seeds_remote: Frontier nodes expanded here / by a remote partition.
        hop_seeds_cached: Remote-owned frontier nodes expanded here from the topology cache (also
            counted in ``hop_seeds_local``).
        remote_sampling_rounds: Hops that sent at least one remote one-hop request.
        sampling_requests: One-hop requests sent (at most one per remote partition and hop).
        nodes_local / nodes_remote: Sampled nodes (output node lists) owned here / elsewhere.
        feature_rows_local / feature_rows_remote: Node and edge feature rows read here / fetched.
        feature_rows_cached: Rows other partitions own, read from this partition's feature cache.
        feature_requests: Feature requests sent (at most one per remote partition and batch).
        bytes_sent / bytes_received: Tensor payload bytes of remote requests and replies (feature replies as
            they travelled: with ``remote_rows="int8"`` a quantised row counts its codes plus 8 bytes).
    """
    batches: int = 0
    hop_seeds_local: int = 0
    hop_seeds_remote: int = 0
    hop_seeds_cached: int = 0
    remote_sampling_rounds: int = 0
    sampling_requests: int = 0
    nodes_local: int = 0
    nodes_remote: int = 0
    feature_rows_local: int = 0
    feature_rows_remote: int = 0
    feature_rows_cached: int = 0
    feature_requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0

    def record_hop(self, plan, sent: int, received: int) -> None:
        """Adds one hop's routing (a :class:`~pyg_dist.sampler.plan.HopPlan`) and payload bytes."""
        remote = plan.num_remote_seeds
        self.hop_seeds_remote += remote
        self.hop_seeds_cached += plan.num_cached_seeds
        self.hop_seeds_local += sum(r.size for r in plan.routes) - remote
        self.sampling_requests += len(plan.requests)
        self.remote_sampling_rounds += bool(plan.requests)
        self.bytes_sent += sent
        self.bytes_received += received

    def reset(self) -> None:
        """Sets every counter back to zero."""
        for name in self.__dataclass_fields__:
            setattr(self, name, 0)

    def summary(self) -> Dict[str, float]:
        """The totals plus derived ratios: local fractions and per-batch averages."""
        out: Dict[str, float] = dict(asdict(self))
        b = max(self.batches, 1)
        out["local_node_frac"] = self.nodes_local / max(self.nodes_local + self.nodes_remote, 1)
        rows = max(self.feature_rows_local + self.feature_rows_cached + self.feature_rows_remote, 1)
        out["local_feature_frac"] = self.feature_rows_local / rows
        out["local_or_cached_feature_frac"] = (self.feature_rows_local + self.feature_rows_cached) / rows
        out["requests_per_batch"] = (self.sampling_requests + self.feature_requests) / b
        out["remote_rounds_per_batch"] = self.remote_sampling_rounds / b
        out["bytes_per_batch"] = (self.bytes_sent + self.bytes_received) / b
        return out


def remote_count(book, partition: int, group, ids: Tensor) -> Tuple[int, Set[int]]:
    """How many of ``ids`` other partitions own, and which partitions those are (one counting pass)."""
    if not ids.numel():
        return 0, set()
    counts = book.count_by_owner(group, ids)
    owners = {p for p, c in enumerate(counts) if c and p != partition}
    return ids.numel() - counts[partition], owners


__all__ = ["SamplerStats", "remote_count"]
