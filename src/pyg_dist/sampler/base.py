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
import warnings
from typing import Any, Dict, List, Optional

from torch import Tensor
from torch_geometric.sampler import BaseSampler, EdgeSamplerInput, NegativeSampling, NodeSamplerInput
from torch_geometric.sampler.base import NumNeighbors

from pyg_dist._types import HOMO_NODE, EdgeType, NodeType
from pyg_dist.errors import InvalidArgumentError, check_choice
from pyg_dist.ops import TEMPORAL_STRATEGIES
from pyg_dist.ops.keys import key_generator, mix, random_key
from pyg_dist.sampler import links, seeds, timing
from pyg_dist.sampler.hops import HopOptions, sample_hops
from pyg_dist.sampler.induced import induce
from pyg_dist.sampler.output import TypedSample, to_sampler_output

#: Word mixed into a batch key for its negative samples (the hops use the key itself).
_NEGATIVES = -1
#: PyG's ``SubgraphType`` values, and ``'disjoint'`` (= ``disjoint=True``).
SUBGRAPH_TYPES = ("directional", "bidirectional", "induced", "disjoint")
#: PyG's message when disjoint (or temporal, hence disjoint) sampling meets induced subgraphs.
INDUCED_DISJOINT = "'disjoint' sampling not supported for neighbor sampling with `subgraph_type='induced'`"


def check_sampling_args(where: str, num_neighbors, subgraph_type, temporal_strategy: str, directed) -> str:
    """The arguments both samplers share; returns ``subgraph_type`` as a string (PyG's deprecated
    ``directed=False`` means ``'induced'``, with PyG's warning)."""
    if not directed:
        warnings.warn(f"The usage of the 'directed' argument in '{where}' is deprecated. Use "
                      "`subgraph_type='induced'` instead.", stacklevel=3)
        subgraph_type = "induced"
    subgraph_type = str(getattr(subgraph_type, "value", subgraph_type))
    if subgraph_type not in SUBGRAPH_TYPES:  # PyG: SubgraphType(value) raises ValueError
        raise InvalidArgumentError(where, "subgraph_type", subgraph_type,
                                   f"one of {list(SUBGRAPH_TYPES)} ({subgraph_type!r} is not a valid SubgraphType)")
    check_choice(where, "temporal_strategy", temporal_strategy, TEMPORAL_STRATEGIES)
    if not isinstance(num_neighbors, (NumNeighbors, list, tuple, dict)):
        raise InvalidArgumentError(where, "num_neighbors", num_neighbors,
                                   "a list of ints per hop (or a dict of such lists per edge type)")
    return subgraph_type


def fanouts(where: str, num_neighbors: NumNeighbors, edge_types: List[EdgeType]) -> Dict[EdgeType, List[int]]:
    """Per edge type its fanout per hop, from PyG's ``NumNeighbors`` (a list, or a dict per edge type).
    Errors are :class:`InvalidArgumentError` (a ``ValueError``, as PyG's) carrying PyG's phrases."""
    values = num_neighbors.values
    if isinstance(values, (list, tuple)):
        out = {et: list(values) for et in edge_types}
    else:
        given = {k.to_tuple(): list(v) for k, v in values.items()}
        unknown = set(given) - set(edge_types)
        if unknown:
            raise InvalidArgumentError(where, "num_neighbors", sorted(unknown), "edge types of the graph (Not all "
                                       "edge types specified in 'num_neighbors' exist in the graph)")
        if num_neighbors.default is None and len(given) < len(edge_types):
            missing = [et for et in edge_types if et not in given]
            raise InvalidArgumentError(where, "num_neighbors", values, f"an entry for {missing} (Missing number "
                                       f"of neighbors for edge type '{missing[0]}')")
        out = {et: given.get(et, num_neighbors.default) for et in edge_types}
    hops = {len(v) for v in out.values()}
    if len(hops) > 1:
        raise InvalidArgumentError(where, "num_neighbors", values, f"lists of one length (Number of hops must be "
                                   f"the same across all edge types; got {len(hops)} different number of hops)")
    bad = [v for f in out.values() for v in f if not isinstance(v, int) or isinstance(v, bool) or v < -1]
    if bad:
        raise InvalidArgumentError(where, "num_neighbors", values, "ints >= -1 (-1 = all neighbours)")
    return out


class SamplerBase(BaseSampler):
    """The shared body of :class:`~pyg_dist.sampler.NeighborSampler` and ``DistNeighborSampler``.

    Subclasses set ``is_hetero``, ``num_nodes``, ``edge_types`` and ``_graph`` (a
    :class:`~pyg_dist.sampler.graph.SamplingGraph`), call :meth:`_set_sampling`, and implement :meth:`_run`.
    """

    is_hetero: bool
    num_nodes: Dict[NodeType, int]
    disjoint: bool
    subgraph_type: str
    _options: HopOptions
    _where: str = "sampler"
    #: Counters of the distributed sampler (a :class:`~pyg_dist.sampler.stats.SamplerStats`), or ``None``.
    stats: Any = None

    def _set_sampling(self, num_neighbors, subgraph_type: str, replace: bool, disjoint: bool, temporal_strategy: str,
                      time_level: Optional[str], weighted: bool, backend: str, timeout: float = 60.0) -> None:
        """Sets the sampling attributes (PyG's names) and the hop loop's options."""
        self.num_neighbors = num_neighbors if isinstance(num_neighbors, NumNeighbors) else NumNeighbors(num_neighbors)
        self.subgraph_type, self.replace, self.temporal_strategy = subgraph_type, bool(replace), temporal_strategy
        self.time_level = time_level
        self.disjoint = bool(disjoint) or subgraph_type == "disjoint" or time_level is not None
        if subgraph_type == "induced" and self.disjoint:  # PyG refuses it too (temporal implies disjoint)
            raise InvalidArgumentError(self._where, "subgraph_type", subgraph_type, "'directional' or "
                                       f"'bidirectional' with disjoint or temporal sampling ({INDUCED_DISJOINT})")
        self._options = HopOptions(fanouts(self._where, self.num_neighbors, self.edge_types),
                                   self.num_neighbors.num_hops, self.replace, self.disjoint, temporal_strategy,
                                   time_level, weighted, backend, timeout, pools={t: [] for t in self.num_nodes})

    # ------------------------------------------------------------------ to implement
    def _run(self, coro):
        """Drives one batch's coroutine to its result."""
        raise NotImplementedError

    @property
    def is_temporal(self) -> bool:
        """Whether the sampler compares times (``time_attr`` given)."""
        return self.time_level is not None

    @property
    def node_time(self) -> Optional[Dict[NodeType, Tensor]]:
        """Full node time per type (node-level temporal sampling; seeds and negatives default to it)."""
        return dict(self._graph.node_time) if self.time_level == "node" else None

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
        sample = seeds.expand(await self._hops(distinct, seed_time, key), repeats)
        if self.subgraph_type == "induced":  # the same nodes, every edge among them (:mod:`.induced`)
            sample = await induce(self._graph, self._options, sample, self.stats)
        return sample

    async def sample_from_nodes_async(self, inputs: NodeSamplerInput, key: Optional[int] = None):
        """Coroutine of :meth:`sample_from_nodes`."""
        async with self._slot():
            with timing.batch_clock():
                return await self._node_batch(inputs, key)

    async def _node_batch(self, inputs: NodeSamplerInput, key: Optional[int]):
        ntype = inputs.input_type if self.is_hetero else HOMO_NODE
        seed_time = None if inputs.time is None else {ntype: inputs.time}
        sample = await self.sample_typed_async({ntype: inputs.node}, seed_time, key)
        return await self._finish(self._output(sample), (inputs.input_id, inputs.time))

    async def sample_from_edges_async(self, inputs: EdgeSamplerInput, neg_sampling: Optional[NegativeSampling] = None,
                                      key: Optional[int] = None):
        """Coroutine of :meth:`sample_from_edges`: :func:`~.links.prepare_link`, the node-level
        sampling, :func:`~.links.finish_link`."""
        async with self._slot():
            with timing.batch_clock():
                return await self._link_batch(inputs, neg_sampling, key)

    async def _link_batch(self, inputs: EdgeSamplerInput, neg_sampling, key: Optional[int]):
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


__all__ = ["SamplerBase", "check_sampling_args", "fanouts", "SUBGRAPH_TYPES", "INDUCED_DISJOINT"]
