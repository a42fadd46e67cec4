"""What a batch does on N partitions: the counts the planner's model needs, by replaying the sampler offline.

For each part count ``N``, the graph is split the way the partitioner would (METIS k-way with its seed and
balance, or random), and a few batches are sampled the way a rank samples them (seeds drawn from the nodes
its part owns, one hop at a time, each hop expanding only the nodes the batch had not reached yet, with the
job's fanouts), on the whole graph in this process. What each batch would have sent elsewhere follows from
the owners: the sampled edges whose destination another part owns (its one-hop replies), the distinct other
parts asked per hop (its calls), the feature rows another part owns. The hops are the product's own kernel
(:func:`pyg_dist.ops.hop.one_hop`). No RPC, no folder: seconds per ``N``.

With ``cache_ratio`` (``TrainConfig.cache_ratio``, policy ``"degree"``), each part also holds the cache
``dist_session`` would fill (:func:`cache_masks`): its remote nodes ranked by how many of its owned nodes link to
them, most first, ties by id, as many as ``cache_ratio`` of its own rows (the budget's 8-byte id per row is left
out: 2 % of a 400-byte row); a batch's remote rows in it are read there, not fetched.

Example:
    >>> import torch
    >>> rowptr = torch.tensor([0, 1, 3, 4]); col = torch.tensor([1, 0, 2, 1])   # a path 0 - 1 - 2
    >>> c = replay(Graph(rowptr, col), torch.tensor([0, 0, 1]), [-1], batch_size=1, batches=3)
    >>> c.edges > 0 and 0.0 <= c.remote_row_frac <= 1.0
    True
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

import torch
from torch import Tensor

from pyg_dist.errors import InvalidArgumentError


@dataclass
class Graph:
    """A symmetric graph as CSR (``rowptr``, ``col``: the neighbours of node ``v`` are ``col[rowptr[v]:rowptr[v+1]]``),
    with the nodes seeds may be drawn from (``train``: a bool mask, ``None`` = every node)."""
    rowptr: Tensor
    col: Tensor
    train: Optional[Tensor] = None
    _symmetric: Optional[bool] = field(default=None, repr=False, compare=False)

    def check(self, where: str = "graph") -> "Graph":
        """Raises :class:`~pyg_dist.errors.InvalidArgumentError` naming ``where`` unless ``rowptr`` starts at 0,
        never decreases and ends at ``col``'s length, every ``col`` value is a node and ``train`` (if any) is a
        bool mask of the nodes; returns self."""
        rp, col = self.rowptr, self.col
        if rp.dim() != 1 or rp.numel() < 1 or int(rp[0]) != 0 or int(rp[-1]) != col.numel() or \
                bool((rp[1:] < rp[:-1]).any()):
            raise InvalidArgumentError("Graph.check", where, f"rowptr of {rp.numel()} values, col of {col.numel()}",
                                       "a CSR rowptr: 0 first, non-decreasing, len(col) last")
        if col.numel() and (int(col.min()) < 0 or int(col.max()) >= self.num_nodes):
            raise InvalidArgumentError("Graph.check", where, f"col values in [{int(col.min())}, {int(col.max())}]",
                                       f"node ids in [0, {self.num_nodes})")
        if self.train is not None and (self.train.dtype != torch.bool or self.train.numel() != self.num_nodes):
            raise InvalidArgumentError("Graph.check", where, f"train mask {self.train.dtype} x {self.train.numel()}",
                                       f"a bool mask of {self.num_nodes} nodes")
        return self

    def is_symmetric(self) -> bool:
        """Whether every edge ``u -> v`` has its ``v -> u`` (METIS needs it; worked out once)."""
        if self._symmetric is not None:
            return self._symmetric
        n = self.num_nodes
        src = torch.repeat_interleave(torch.arange(n), self.rowptr[1:] - self.rowptr[:-1])
        col = self.col.long()
        fwd = torch.sort(src * n + col).values
        self._symmetric = torch.equal(fwd, torch.sort(col * n + src).values)
        return self._symmetric

    @property
    def num_nodes(self) -> int:
        return self.rowptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.col.numel()

    @property
    def num_train(self) -> int:
        return self.num_nodes if self.train is None else int(self.train.sum())


@dataclass
class Counts:
    """Per batch of one rank with ``num_parts`` parts (means over the replayed batches)."""
    num_parts: int
    edges: float            # sampled edges (all hops)
    rows: float             # unique nodes = feature rows
    remote_edge_frac: float  # of the sampled edges, those another part sampled (one-hop replies)
    remote_row_frac: float   # of the rows, those another part owns
    hop_calls: float        # one-hop calls to other parts (distinct other owners, summed over hops)
    row_calls: float        # feature calls (distinct other owners of the rows fetched)
    max_nodes_frac: float   # the largest part's nodes / all nodes
    max_edges_frac: float   # the largest part's in-edges / all edges (its CSC)
    cached_row_frac: float = 0.0  # of the rows, remote ones the part's cache holds (read there, not fetched)
    cache_rows: float = 0.0  # rows in a part's cache (the largest part's)

    @property
    def fetched_row_frac(self) -> float:
        """Of the rows, those fetched from another part (remote and not cached)."""
        return max(self.remote_row_frac - self.cached_row_frac, 0.0)

    def as_dict(self) -> Dict[str, float]:
        """The counts as plain values (``--json``)."""
        return asdict(self)


def assign(graph: Graph, num_parts: int, method: str = "metis", seed: int = 0) -> Tensor:
    """The part of every node: METIS k-way (the partitioner's seed and 3 % balance) or random."""
    if num_parts < 1:
        raise InvalidArgumentError("assign", "num_parts", num_parts, "an int >= 1")
    if num_parts == 1:
        return torch.zeros(graph.num_nodes, dtype=torch.long)
    if method == "random":
        return torch.randint(0, num_parts, (graph.num_nodes,), generator=torch.Generator().manual_seed(seed))
    if method != "metis":
        raise InvalidArgumentError("assign", "method", method, "'metis' or 'random'")
    if not graph.is_symmetric():
        raise InvalidArgumentError("assign", "graph", "a directed graph", "every edge with its reverse for METIS "
                                   "(or method='random', or partition folders written for each part count)")
    from pyg_dist.partition.metis import metis_kway
    return metis_kway(graph.rowptr.numpy(), graph.col.numpy(), num_parts, seed=seed)[0]


def cache_masks(graph: Graph, owner: Tensor, cache_ratio: float) -> Dict[int, Tensor]:
    """Per part, a bool mask over the nodes: the remote rows its degree cache holds (module docstring)."""
    num_parts = int(owner.max()) + 1 if owner.numel() else 1
    src = torch.repeat_interleave(torch.arange(graph.num_nodes), graph.rowptr[1:] - graph.rowptr[:-1])
    col = graph.col.long()
    cut = owner[src] != owner[col]  # an owned node's link to a remote one: the remote one's count in that part
    keys, counts = torch.unique(col[cut] * num_parts + owner[src[cut]], return_counts=True)
    node, part = keys // num_parts, keys % num_parts
    own = torch.bincount(owner, minlength=num_parts)
    masks = {}
    for p in range(num_parts):
        mine = (part == p).nonzero().flatten()   # node ids ascending: a stable sort keeps ties by id
        order = torch.sort(counts[mine], descending=True, stable=True).indices
        keep = node[mine[order[:int(cache_ratio * int(own[p]))]]]
        masks[p] = torch.zeros(graph.num_nodes, dtype=torch.bool)
        masks[p][keep] = True
    return masks


def _one_batch(graph: Graph, csc, owner: Tensor, part: int, seeds: Tensor, fanouts: List[int],
               gen: torch.Generator, cached: Optional[Tensor] = None) -> List[float]:
    """``[edges, rows, remote edges, remote rows, hop calls, row calls, cached rows]`` of one batch of
    ``part`` (``cached``: its cache's mask, or none)."""
    from pyg_dist.ops.hop import one_hop
    reached = torch.zeros(graph.num_nodes, dtype=torch.bool)
    reached[seeds] = True
    frontier, edges, remote_edges, hop_calls = seeds, 0, 0, 0
    for k in fanouts:
        if frontier.numel() == 0:
            break
        hop = one_hop(csc, frontier, k, key=int(torch.randint(0, 2**31, (1,), generator=gen)))
        elsewhere = owner[frontier] != part
        edges += hop.nbr.numel()
        remote_edges += int(hop.count[elsewhere].sum())
        hop_calls += int(torch.unique(owner[frontier[elsewhere]]).numel())
        new = torch.unique(hop.nbr[~reached[hop.nbr]])
        reached[new] = True
        frontier = new
    rows = reached.nonzero().flatten()
    remote = owner[rows] != part
    hit = remote & cached[rows] if cached is not None else torch.zeros_like(remote)
    return [edges, rows.numel(), remote_edges, int(remote.sum()), hop_calls,
            int(torch.unique(owner[rows[remote & ~hit]]).numel()), int(hit.sum())]


def replay(graph: Graph, owner: Tensor, fanouts: List[int], batch_size: int, batches: int = 8,
           seed: int = 0, cache_ratio: Optional[float] = None) -> Counts:
    """The mean :class:`Counts` of ``batches`` batches, spread over the parts of ``owner`` (each part with its
    degree cache of ``cache_ratio`` when given)."""
    if cache_ratio is not None and not 0 <= cache_ratio <= 1:
        raise InvalidArgumentError("replay", "cache_ratio", cache_ratio, "None or a fraction in [0, 1]")
    num_parts = int(owner.max()) + 1 if owner.numel() else 1
    from pyg_dist.ops.csc import CSC
    csc = CSC(graph.rowptr, graph.col)  # symmetric: the in-neighbours are the neighbours
    gen = torch.Generator().manual_seed(seed)
    train = graph.train if graph.train is not None else torch.ones(graph.num_nodes, dtype=torch.bool)
    masks = cache_masks(graph, owner, cache_ratio) if cache_ratio and num_parts > 1 else {}
    sums = torch.zeros(7, dtype=torch.float64)
    done = 0
    for b in range(batches):
        part = b % num_parts
        pool = (train & (owner == part)).nonzero().flatten()
        if pool.numel() == 0:
            continue
        seeds = pool[torch.randperm(pool.numel(), generator=gen)[:batch_size]]
        sums += torch.tensor(_one_batch(graph, csc, owner, part, seeds, fanouts, gen, masks.get(part)),
                             dtype=torch.float64)
        done += 1
    if done == 0:
        raise InvalidArgumentError("replay", "graph", f"{graph.num_train} training nodes", "at least one seed")
    e, r, re, rr, hc, rc, cr = (sums / done).tolist()
    sizes = torch.bincount(owner, minlength=num_parts).double()
    in_edges = torch.zeros(num_parts, dtype=torch.float64).index_add_(
        0, owner, (graph.rowptr[1:] - graph.rowptr[:-1]).double())
    return Counts(num_parts, e, r, re / max(e, 1.0), rr / max(r, 1.0), hc, rc,
                  float(sizes.max() / max(graph.num_nodes, 1)), float(in_edges.max() / max(graph.num_edges, 1)),
                  cr / max(r, 1.0), float(max((int(m.sum()) for m in masks.values()), default=0)))


__all__ = ["Graph", "Counts", "assign", "replay", "cache_masks"]
