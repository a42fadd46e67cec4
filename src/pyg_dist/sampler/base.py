"""What every pyg_dist sampler does, written once: node batches, link batches, seeds, keys, outputs.

:class:`SamplerBase` implements PyG's ``BaseSampler`` API (``sample_from_nodes``,
``sample_from_edges``) and the typed core (``sample_typed``) as coroutines over the one hop loop
(:func:`pyg_dist.sampler.hops.sample_hops`). A subclass says how a coroutine is driven (a one-machine
sampler: to completion at once; a distributed one: on pyg_dist's event loop, with a timeout) and how a
finished sample becomes a batch (:meth:`SamplerBase._finish`: the distributed sampler fetches features).

Keys: ``key=None`` draws one key per batch from torch's global generator; loaders pass a key derived
from ``(seed, epoch, batch index, rank)`` so a batch is reproducible whatever runs beside it.
"""
from __future__ import annotations

import contextlib
from typing import Dict, Optional

from torch import Tensor
from torch_geometric.sampler import BaseSampler, EdgeSamplerInput, NegativeSampling, NodeSamplerInput

from pyg_dist._types import HOMO_NODE, NodeType
from pyg_dist.ops.keys import key_generator, mix, random_key
from pyg_dist.sampler import links, seeds
from pyg_dist.sampler.hops import HopOptions, sample_hops
from pyg_dist.sampler.output import TypedSample, to_sampler_output

#: Word mixed into a batch key for its negative samples (the hops use the key itself).
_NEGATIVES = -1


class SamplerBase(BaseSampler):
    """The shared body of :class:`~pyg_dist.sampler.NeighborSampler` and ``DistNeighborSampler``.

    Subclasses set ``is_hetero``, ``num_nodes``, ``disjoint``, ``subgraph_type``, ``_graph`` (a
    :class:`~pyg_dist.sampler.graph.SamplingGraph`) and ``_options`` (:class:`HopOptions`), and
    implement :meth:`_run` and :attr:`node_time`.
    """

    is_hetero: bool
    num_nodes: Dict[NodeType, int]
    disjoint: bool
    subgraph_type: str
    _options: HopOptions
    _where: str = "sampler"

    # ------------------------------------------------------------------ to implement
    def _run(self, coro):
        """Drives one batch's coroutine to its result."""
        raise NotImplementedError

    @property
    def is_temporal(self) -> bool:
        raise NotImplementedError

    @property
    def node_time(self) -> Optional[Dict[NodeType, Tensor]]:
        """Full node time per type (node-level temporal sampling; seeds and negatives default to it)."""
        raise NotImplementedError

    async def _finish(self, out, metadata):
        """Turns PyG's sampler output (``metadata``: PyG's) into the batch the loader gets."""
        out.metadata = metadata
        return out

    def _slot(self):
        """An async context bounding batches in flight (the distributed sampler's ``concurrency``)."""
        return contextlib.nullcontext()

    async def _hops(self, seed, seed_time, key: int) -> TypedSample:
        return await sample_hops(self._graph, self._options, seed, seed_time, key)

    # ------------------------------------------------------------------ PyG's API
    def sample_from_nodes(self, inputs: NodeSamplerInput, key: Optional[int] = None, **kwargs):
        """Samples the subgraph around ``inputs.node``; returns PyG's (Hetero)SamplerOutput whose
        ``metadata`` starts with ``(input_id, seed_time)``. ``key``: the batch's random key."""
        return self._run(self.sample_from_nodes_async(inputs, key))

    def sample_from_edges(self, inputs: EdgeSamplerInput, neg_sampling: Optional[NegativeSampling] = None,
                          key: Optional[int] = None):
        """Link batch (PyG semantics, see :mod:`pyg_dist.sampler.links`); ``key``: the batch's random key."""
        return self._run(self.sample_from_edges_async(inputs, neg_sampling, key))

    def sample_typed(self, seed: Dict[NodeType, Tensor], seed_time: Optional[Dict[NodeType, Tensor]] = None,
                     key: Optional[int] = None) -> TypedSample:
        """The node-level core on typed dicts (a homogeneous graph uses the ``"_N"`` keys).

        Args:
            seed: Global seed ids per node type. Repeats are allowed: without ``disjoint`` each distinct
                seed is sampled once and its repeats share its neighbourhood (:mod:`.seeds`); with
                ``disjoint`` every seed (and every position across types) is its own subgraph.
            seed_time: Timestamps per seed (temporal sampling). Defaults to the seeds' node time.
            key: The batch's random key (default: drawn from torch's global generator).
        """
        return self._run(self.sample_typed_async(seed, seed_time, key))

    # ------------------------------------------------------------------ coroutines
    async def sample_typed_async(self, seed: Dict[NodeType, Tensor], seed_time: Optional[Dict[NodeType, Tensor]] = None,
                                 key: Optional[int] = None) -> TypedSample:
        """Coroutine of :meth:`sample_typed`."""
        where = f"{self._where}.sample_typed"
        seed = seeds.check_typed_seed(where, seed, self.num_nodes)
        seed_time = seeds.check_seed_time(where, seed, seed_time, self.is_temporal, self.node_time)
        key = random_key() if key is None else int(key)
        if self.disjoint:
            return await self._hops(seed, seed_time, key)
        distinct, repeats = seeds.dedupe(seed)
        return seeds.expand(await self._hops(distinct, seed_time, key), repeats)

    async def sample_from_nodes_async(self, inputs: NodeSamplerInput, key: Optional[int] = None):
        """Coroutine of :meth:`sample_from_nodes`."""
        async with self._slot():
            ntype = inputs.input_type if self.is_hetero else HOMO_NODE
            seed_time = None if inputs.time is None else {ntype: inputs.time}
            sample = await self.sample_typed_async({ntype: inputs.node}, seed_time, key)
            return await self._finish(self._output(sample), (inputs.input_id, inputs.time))

    async def sample_from_edges_async(self, inputs: EdgeSamplerInput, neg_sampling: Optional[NegativeSampling] = None,
                                      key: Optional[int] = None):
        """Coroutine of :meth:`sample_from_edges`: :func:`~.links.prepare_link`, the node-level
        sampling, :func:`~.links.finish_link`."""
        async with self._slot():
            key = random_key() if key is None else int(key)
            neg = NegativeSampling.cast(neg_sampling)
            link = links.prepare_link(inputs, neg, self.num_nodes, self.node_time, self.disjoint,
                                      key_generator(mix(key, _NEGATIVES)))
            sample = await self.sample_typed_async(link.layout.seed, link.layout.seed_time, key)
            sample, metadata = links.finish_link(sample, link, inputs.input_id, neg, self.disjoint)
            return await self._finish(self._output(sample), metadata)

    def _output(self, sample: TypedSample):
        out = to_sampler_output(sample, self.is_hetero)
        return out.to_bidirectional() if self.subgraph_type == "bidirectional" else out


__all__ = ["SamplerBase"]
