"""Seeds of link-level sampling: negatives, the seed layout, and PyG's link metadata.

A link batch is a set of positive edges ``(src, dst)``. This module turns it into the node seeds of a
node-level sampler and, once that sampler has run, into the fields PyG's ``LinkLoader.filter_fn``
expects in ``SamplerOutput.metadata``:

* no negatives / ``"binary"``: ``(input_id, edge_label_index, edge_label, edge_label_time)``;
* ``"triplet"``: ``(input_id, src_index, dst_pos_index, dst_neg_index, seed_time)``.

Semantics follow PyG's ``edge_sample``: binary negatives are ``ceil(amount * num_pos)`` random pairs
labelled ``0`` (generated labels are float ones for positives; the loader shifts user labels by ``+1``
when they start at ``0``); triplet negatives are ``amount`` random destinations per positive (row ``i`` of
``dst_neg_index``; PyG's layout); seeds are deduplicated per node type unless ``disjoint``, in
which case every endpoint is its own subgraph and ``batch`` names the positive whose time it carries;
temporal seeds carry ``edge_label_time``, and negatives respect ``node_time <= seed time`` when the
sampler has node times. Optionally (:class:`FilteredNegativeSampling`) negatives that are known edges
are redrawn.

Both samplers run the same body: :func:`prepare_link` (pure: negatives, node seeds, their layout), then
their own node-level sampling (awaited by the distributed sampler), then :func:`finish_link` (pure:
``batch`` of disjoint subgraphs, PyG's metadata). Negatives draw from a generator the sampler seeds
with the batch's key, so a link batch is as reproducible as a node batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling

from pyg_dist._types import HOMO_EDGE, EdgeType, NodeType
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.sampler.output import TypedSample

_WHERE = "edge_sample"
#: ``sample_fn(seed, seed_time) -> TypedSample``: the node-level sampler on typed dicts.
SampleFn = Callable[[Dict[NodeType, Tensor], Optional[Dict[NodeType, Tensor]]], TypedSample]


class LinkMetadata(NamedTuple):
    """``SamplerOutput.metadata`` of a link batch without negatives or with binary negatives."""
    input_id: Optional[Tensor]
    edge_label_index: Tensor
    edge_label: Optional[Tensor]
    edge_label_time: Optional[Tensor]


class TripletMetadata(NamedTuple):
    """``SamplerOutput.metadata`` of a link batch with triplet negatives."""
    input_id: Optional[Tensor]
    src_index: Tensor
    dst_pos_index: Tensor
    dst_neg_index: Tensor
    seed_time: Optional[Tensor]


# Known edges (optional rejection of false negatives) ###################################################

def edge_keys(src: Tensor, dst: Tensor, num_dst: int) -> Tensor:
    """Sorted unique int64 keys ``src * num_dst + dst`` of a set of edges.

    Example:
        >>> edge_keys(torch.tensor([1, 0, 1]), torch.tensor([2, 1, 2]), num_dst=3)
        tensor([1, 5])
    """
    return torch.unique(src.long() * num_dst + dst.long())


def contains_edges(keys: Tensor, src: Tensor, dst: Tensor, num_dst: int) -> Tensor:
    """Boolean mask: is ``(src[i], dst[i])`` among the sorted ``keys`` of :func:`edge_keys`?

    Example:
        >>> keys = edge_keys(torch.tensor([0]), torch.tensor([1]), num_dst=3)
        >>> contains_edges(keys, torch.tensor([0, 1]), torch.tensor([1, 1]), num_dst=3)
        tensor([ True, False])
    """
    query = src.long() * num_dst + dst.long()
    if keys.numel() == 0:
        return torch.zeros(query.shape, dtype=torch.bool)
    pos = torch.searchsorted(keys, query).clamp_(max=keys.numel() - 1)
    return keys[pos] == query


class FilteredNegativeSampling(NegativeSampling):
    """PyG's ``NegativeSampling`` that also redraws negatives which are known (positive) edges.

    PyG samples negatives approximately (a negative may be a real edge). This variant redraws such
    negatives up to ``max_tries`` times; any still colliding after that are kept (documented, never
    dropped). ``LinkNeighborLoader(..., filter_false_negatives=True)`` builds it for you.

    Args:
        mode: ``"binary"`` or ``"triplet"``.
        amount: Negatives per positive.
        src_weight: Optional source sampling weights.
        dst_weight: Optional destination sampling weights.
        known_keys: Sorted keys of the known edges, from :func:`edge_keys`.
        num_dst: Number of destination nodes used to build ``known_keys``.
        max_tries: Redraw rounds.

    Example:
        >>> keys = edge_keys(torch.tensor([0, 1]), torch.tensor([1, 0]), num_dst=2)
        >>> neg = FilteredNegativeSampling("binary", 1, known_keys=keys, num_dst=2)
    """

    def __init__(self, mode, amount=1, src_weight=None, dst_weight=None, *, known_keys: Tensor,
                 num_dst: int, max_tries: int = 10):
        super().__init__(mode, amount, src_weight, dst_weight)
        self.known_keys, self.num_dst, self.max_tries = known_keys, int(num_dst), int(max_tries)


# Negative sampling ######################################################################################

def draw_nodes(count: int, num_nodes: int, weight: Optional[Tensor] = None,
               generator: Optional[torch.Generator] = None) -> Tensor:
    """``count`` node ids drawn uniformly, or proportionally to ``weight`` (with replacement)."""
    if weight is None:
        return torch.randint(num_nodes, (count,), generator=generator)
    return torch.multinomial(weight, count, replacement=True, generator=generator)


def draw_negatives(count: int, num_nodes: int, weight: Optional[Tensor] = None,
                   seed_time: Optional[Tensor] = None, node_time: Optional[Tensor] = None,
                   max_tries: int = 5, generator: Optional[torch.Generator] = None) -> Tensor:
    """Draws ``count`` negative endpoints; with times, negative ``j`` must satisfy
    ``node_time[neg] <= seed_time[j]``.

    Invalid draws are redrawn ``max_tries`` times; the rest become the earliest node (PyG's rule).

    Args:
        count: Number of negatives.
        num_nodes: Number of nodes of the endpoint's type.
        weight: Optional sampling weights (length ``num_nodes``).
        seed_time: Per-negative time bound (length ``count``), or ``None``.
        node_time: Per-node time, or ``None`` for no temporal constraint.
        max_tries: Redraw rounds for invalid negatives.
        generator: Where the draws come from (default: torch's global generator).
    """
    out = draw_nodes(count, num_nodes, weight, generator)
    if node_time is None or seed_time is None or count == 0:
        return out
    bad = (node_time[out] > seed_time).nonzero().view(-1)
    for _ in range(max_tries):
        if bad.numel() == 0:
            return out
        out[bad] = draw_nodes(bad.numel(), num_nodes, weight, generator)
        bad = bad[node_time[out[bad]] > seed_time[bad]]
    out[bad] = torch.argmin(node_time)
    return out


@dataclass(frozen=True)
class LinkSeeds:
    """Endpoints of one link batch after negative sampling (positives first).

    ``src``/``dst`` hold ``num_pos + num_neg`` entries for binary negatives; for triplet negatives
    ``src`` holds ``num_pos`` and ``dst`` ``num_pos * (1 + amount)`` entries.
    """
    src: Tensor
    dst: Tensor
    src_time: Optional[Tensor]
    dst_time: Optional[Tensor]
    edge_label: Optional[Tensor]
    num_pos: int


def _cycle(t: Optional[Tensor], length: int) -> Optional[Tensor]:
    """``t`` repeated to ``length`` entries (entry ``j`` is ``t[j % len(t)]``)."""
    if t is None:
        return None
    return t.repeat(math.ceil(length / max(t.numel(), 1)))[:length]


def _redraw_known(neg: NegativeSampling, src: Tensor, dst: Tensor, draw_src: Optional[Callable],
                  draw_dst: Callable) -> Tuple[Tensor, Tensor]:
    """Redraws negatives that are known edges (see :class:`FilteredNegativeSampling`); sources too when
    ``draw_src`` is given."""
    if not isinstance(neg, FilteredNegativeSampling):
        return src, dst
    src, dst = src.clone(), dst.clone()
    bad = contains_edges(neg.known_keys, src, dst, neg.num_dst).nonzero().view(-1)
    for _ in range(neg.max_tries):
        if bad.numel() == 0:
            break
        if draw_src is not None:
            src[bad] = draw_src(bad)
        dst[bad] = draw_dst(bad)
        bad = bad[contains_edges(neg.known_keys, src[bad], dst[bad], neg.num_dst)]
    return src, dst


def _owner(num_neg: int, num_pos: int, amount: int, disjoint: bool) -> Tensor:
    """Positive each triplet negative belongs to: ``j % num_pos`` when disjoint, else ``j // amount``
    (PyG's layouts of ``dst_neg_index`` in the two modes)."""
    j = torch.arange(num_neg)
    return j % max(num_pos, 1) if disjoint else j // max(amount, 1)


def link_seeds(inputs: EdgeSamplerInput, neg: Optional[NegativeSampling], num_nodes: Dict[NodeType, int],
               node_time: Optional[Dict[NodeType, Tensor]] = None, disjoint: bool = False,
               generator: Optional[torch.Generator] = None) -> LinkSeeds:
    """Appends negatives (if any) to the positive endpoints of ``inputs``.

    Args:
        inputs: The positive edges (``row``, ``col``, optional ``label``/``time``, ``input_type``).
        neg: PyG's ``NegativeSampling`` (or :class:`FilteredNegativeSampling`), or ``None``.
        num_nodes: Number of nodes per node type.
        node_time: Per-type node times; negatives then satisfy ``node_time <= seed time``.
        disjoint: Whether seeds stay separate subgraphs (decides the triplet negative layout).
        generator: Where the negatives are drawn from (default: torch's global generator).

    Example:
        >>> inp = EdgeSamplerInput(None, torch.tensor([0, 1]), torch.tensor([1, 2]))
        >>> s = link_seeds(inp, NegativeSampling("binary", 2), {"_N": 3})
        >>> s.src.numel(), s.edge_label.tolist()
        (6, [1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    """
    src_type, _, dst_type = inputs.input_type or HOMO_EDGE
    src, dst, label, time = inputs.row, inputs.col, inputs.label, inputs.time
    num_pos = src.numel()
    if neg is None:
        return LinkSeeds(src, dst, time, time, label, num_pos)
    num_neg = math.ceil(num_pos * neg.amount)
    node_time = node_time or {}

    def drawer(ntype: NodeType, weight: Optional[Tensor], times: Optional[Tensor]) -> Callable:
        return lambda idx: draw_negatives(idx.numel(), num_nodes[ntype], weight,
                                          None if times is None else times[idx], node_time.get(ntype),
                                          generator=generator)

    every = torch.arange(num_neg)
    if neg.is_binary():
        neg_time = _cycle(time, num_neg)
        draw_src = drawer(src_type, neg.src_weight, neg_time)
        draw_dst = drawer(dst_type, neg.dst_weight, neg_time)
        src_neg = draw_src(every)
        dst_neg = draw_dst(every)
        src_neg, dst_neg = _redraw_known(neg, src_neg, dst_neg, draw_src, draw_dst)
        if label is None:
            label = torch.ones(num_pos)
        label = torch.cat([label, label.new_zeros((num_neg,) + tuple(label.shape[1:]))])
        both_time = _cycle(time, num_pos + num_neg)
        return LinkSeeds(torch.cat([src, src_neg]), torch.cat([dst, dst_neg]), both_time, both_time,
                         label, num_pos)
    owner = _owner(num_neg, num_pos, int(neg.amount), disjoint)
    draw_dst = drawer(dst_type, neg.dst_weight, None if time is None else time[owner])
    dst_neg = draw_dst(every)
    _, dst_neg = _redraw_known(neg, src[owner], dst_neg, None, draw_dst)
    return LinkSeeds(src, torch.cat([dst, dst_neg]), time, _cycle(time, num_pos + num_neg), None, num_pos)


@dataclass(frozen=True)
class SeedLayout:
    """Node seeds of a link batch and where each endpoint of :class:`LinkSeeds` sits among them."""
    seed: Dict[NodeType, Tensor]
    seed_time: Optional[Dict[NodeType, Tensor]]
    src_index: Tensor
    dst_index: Tensor
    #: The link example (position in ``LinkSeeds.src``/``dst``) of each disjoint subgraph. A subgraph is a
    #: seed position, shared by the seeds of every type at that position (and by every node reached from
    #: them, whatever its type): both endpoints of example ``j`` sit at position ``j`` when their types
    #: differ; with one type, sources come first, then destinations.
    example: Tensor


def _subgraph_example(per_type: List[Tensor]) -> Tensor:
    """Subgraph id (a seed position, shared by all types) -> link example. The types agree where their
    positions overlap (each lists examples ``0, 1, ...`` at positions ``0, 1, ...``, or holds every seed)."""
    out = torch.zeros(max((x.numel() for x in per_type), default=0), dtype=torch.int64)
    for x in per_type:
        out[:x.numel()] = x
    return out


def seed_layout(seeds: LinkSeeds, edge_type: EdgeType, disjoint: bool) -> SeedLayout:
    """Concatenates the endpoints per node type (sources first) and, unless ``disjoint``, deduplicates.

    Deduplication is ``torch.unique`` (sorted), as in PyG; ``src_index``/``dst_index`` then point into
    the unique seeds. With ``disjoint`` every endpoint is its own seed, in order.

    Example:
        >>> s = LinkSeeds(torch.tensor([4, 2]), torch.tensor([2, 7]), None, None, None, 2)
        >>> lay = seed_layout(s, ("_N", "_E", "_N"), disjoint=False)
        >>> lay.seed["_N"].tolist(), lay.src_index.tolist(), lay.dst_index.tolist()
        ([2, 4, 7], [1, 0], [0, 2])
    """
    ends = ((edge_type[0], seeds.src, seeds.src_time), (edge_type[-1], seeds.dst, seeds.dst_time))
    ids: Dict[NodeType, list] = {}
    times: Dict[NodeType, list] = {}
    offsets = []
    for ntype, nodes, t in ends:
        offsets.append(sum(x.numel() for x in ids.get(ntype, [])))
        ids.setdefault(ntype, []).append(nodes)
        times.setdefault(ntype, []).append(t)
    example = _subgraph_example([torch.cat([torch.arange(x.numel()) for x in v]) for v in ids.values()])
    seed = {k: torch.cat(v) for k, v in ids.items()}
    seed_time = None
    if seeds.src_time is not None:
        seed_time = {k: torch.cat(v) for k, v in times.items()}
    index = {k: torch.arange(v.numel()) for k, v in seed.items()}
    if not disjoint:
        for k in seed:
            seed[k], index[k] = torch.unique(seed[k], return_inverse=True)
    src_index = index[edge_type[0]][offsets[0]:offsets[0] + seeds.src.numel()]
    dst_index = index[edge_type[-1]][offsets[1]:offsets[1] + seeds.dst.numel()]
    return SeedLayout(seed, seed_time, src_index, dst_index, example)


def link_metadata(input_id: Optional[Tensor], seeds: LinkSeeds, layout: SeedLayout,
                  neg: Optional[NegativeSampling], disjoint: bool
                  ) -> Union[LinkMetadata, TripletMetadata]:
    """PyG's link metadata from the seed layout (see the module docstring for the fields)."""
    if neg is None or neg.is_binary():
        edge_label_index = torch.stack([layout.src_index, layout.dst_index])
        return LinkMetadata(input_id, edge_label_index, seeds.edge_label, seeds.src_time)
    num_pos = seeds.num_pos
    dst_neg = layout.dst_index[num_pos:]
    if disjoint:  # negative j belongs to positive j % num_pos
        dst_neg = dst_neg.view(-1, num_pos).t()
    dst_neg = dst_neg.reshape(num_pos, -1).squeeze(-1)
    return TripletMetadata(input_id, layout.src_index, layout.dst_index[:num_pos], dst_neg, seeds.src_time)


def check_edge_inputs(inputs: EdgeSamplerInput, neg: Optional[NegativeSampling],
                      num_nodes: Dict[NodeType, int], disjoint: bool) -> EdgeType:
    """Validates one link batch against the graph; returns its (typed) edge type."""
    edge_type = inputs.input_type or HOMO_EDGE
    for name, nodes, ntype in (("row", inputs.row, edge_type[0]), ("col", inputs.col, edge_type[-1])):
        if ntype not in num_nodes:
            raise InvalidArgumentError(_WHERE, "inputs.input_type", inputs.input_type,
                                       f"an edge type whose node types are in {sorted(num_nodes)}")
        if nodes.numel() and (int(nodes.min()) < 0 or int(nodes.max()) >= num_nodes[ntype]):
            raise InvalidArgumentError(_WHERE, f"inputs.{name}", nodes,
                                       f"node ids in [0, {num_nodes[ntype]}) of type {ntype!r}")
    if inputs.time is not None and not disjoint:
        raise InvalidArgumentError(_WHERE, "inputs.time", "<tensor>",
                                   "None unless the sampler is temporal or disjoint")
    if neg is not None and neg.is_triplet() and inputs.label is not None:
        raise InvalidArgumentError(_WHERE, "inputs.label", "<tensor>", "None for triplet negatives")
    for name, weight, ntype in (("src_weight", getattr(neg, "src_weight", None), edge_type[0]),
                                ("dst_weight", getattr(neg, "dst_weight", None), edge_type[-1])):
        if weight is not None and weight.numel() != num_nodes[ntype]:
            raise InvalidArgumentError(_WHERE, f"neg_sampling.{name}", tuple(weight.shape),
                                       f"{num_nodes[ntype]} weights, one per {ntype!r} node (The 'weight' attribute "
                                       f"in 'NegativeSampling' needs to match the number of nodes)")
    return edge_type


@dataclass(frozen=True)
class LinkBatch:
    """A link batch prepared for node-level sampling: its edge type, endpoints and node-seed layout."""
    edge_type: EdgeType
    seeds: LinkSeeds
    layout: SeedLayout


def prepare_link(inputs: EdgeSamplerInput, neg: Optional[NegativeSampling], num_nodes: Dict[NodeType, int],
                 node_time: Optional[Dict[NodeType, Tensor]] = None, disjoint: bool = False,
                 generator: Optional[torch.Generator] = None) -> LinkBatch:
    """The first half of link sampling (pure): checks, negatives, node seeds (``layout.seed`` /
    ``layout.seed_time`` go to the node-level sampler)."""
    edge_type = check_edge_inputs(inputs, neg, num_nodes, disjoint)
    seeds = link_seeds(inputs, neg, num_nodes, node_time, disjoint, generator)
    return LinkBatch(edge_type, seeds, seed_layout(seeds, edge_type, disjoint))


def finish_link(sample: TypedSample, link: LinkBatch, input_id: Optional[Tensor], neg: Optional[NegativeSampling],
                disjoint: bool) -> Tuple[TypedSample, Union[LinkMetadata, TripletMetadata]]:
    """The second half (pure): with ``disjoint``, ``batch`` then names the positive edge each subgraph
    belongs to: example ``j`` (positive or negative) maps to ``j % num_pos``, whose ``edge_label_time``
    it carries, whatever the node type (a node reached from subgraph ``s`` carries ``s``'s example).
    This equals PyG's ``batch % num_pos`` except, with one node type, for binary negatives with
    ``amount * num_pos`` not a multiple of ``num_pos``, where PyG's destination subgraphs get the wrong
    positive. Returns the sample and PyG's link metadata."""
    if disjoint and sample.batch is not None:  # subgraph (seed position) -> link example -> its positive
        num_pos = max(link.seeds.num_pos, 1)
        example = link.layout.example
        batch = {k: example.index_select(0, b) % num_pos for k, b in sample.batch.items()}
        sample = replace(sample, batch=batch)
    return sample, link_metadata(input_id, link.seeds, link.layout, neg, disjoint)


def sample_edges(inputs: EdgeSamplerInput, neg: Optional[NegativeSampling], sample_fn: SampleFn,
                 num_nodes: Dict[NodeType, int], node_time: Optional[Dict[NodeType, Tensor]] = None,
                 disjoint: bool = False, generator: Optional[torch.Generator] = None):
    """Link-level sampling around any node-level ``sample_fn(seed, seed_time) -> TypedSample``:
    :func:`prepare_link`, ``sample_fn``, :func:`finish_link`. Returns ``(TypedSample, metadata)``.

    Example:
        >>> sample, md = sample_edges(inputs, None, sampler.sample_typed, sampler.num_nodes)  # doctest: +SKIP
    """
    link = prepare_link(inputs, neg, num_nodes, node_time, disjoint, generator)
    sample = sample_fn(link.layout.seed, link.layout.seed_time)
    return finish_link(sample, link, inputs.input_id, neg, disjoint)
