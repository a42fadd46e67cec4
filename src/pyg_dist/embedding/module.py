"""``DistEmbedding``: a learnable row per node, partitioned like the features, updated sparsely.

Rows live with the partition that owns the node (the partition book decides); the table is a learnable
column of this rank's :class:`~pyg_dist.store.LocalFeatureStore` (shared memory), so reading rows for a
batch is the feature lookup: local rows directly, remote rows with one request per owner. The backward
pass records ``(ids, gradient rows)`` on the module instead of a dense gradient; a sparse optimizer of
:mod:`pyg_dist.embedding.optim` sends them to their owners.

Trainers must join RPC (``num_workers=0``): the forward pass runs in the trainer.
"""
from __future__ import annotations

import itertools
from typing import Callable, Dict, List, Mapping, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist._types import HOMO_NODE
from pyg_dist.errors import InvalidArgumentError, check_positive_int

_NAMES = itertools.count()
InitFn = Callable[[Tensor, int], Tensor]


def normal_init(seed: int = 0, std: float = 1.0, chunk: int = 1 << 16) -> InitFn:
    """Rows drawn from N(0, std²) as a pure function of the global id (chunks of ids share one seeded
    generator), so a table's values do not depend on how the graph was partitioned."""
    def init(ids: Tensor, dim: int) -> Tensor:
        out = torch.empty(ids.numel(), dim)
        if not ids.numel():
            return out
        first, last = int(ids.min()) // chunk, int(ids.max()) // chunk
        for c in range(first, last + 1):
            sel = ((ids >= c * chunk) & (ids < (c + 1) * chunk)).nonzero().view(-1)
            if sel.numel():
                gen = torch.Generator().manual_seed(seed * 1_000_003 + c)
                block = torch.randn(chunk, dim, generator=gen) * std
                out[sel] = block[ids[sel] - c * chunk]
        return out
    return init


class _Rows(torch.autograd.Function):
    """Identity on fetched rows whose backward hands the gradient rows to the module."""

    @staticmethod
    def forward(ctx, anchor, rows, module, node_type, ids):
        ctx.module, ctx.node_type, ctx.ids = module, node_type, ids
        return rows.view_as(rows)  # the fetched rows are this call's own tensor: no copy

    @staticmethod
    def backward(ctx, grad):
        ctx.module._record(ctx.node_type, ctx.ids, grad)
        return torch.zeros(()), None, None, None, None


class DistEmbedding(torch.nn.Module):
    """A partitioned, learnable embedding table (one row per node of each type).

    Args:
        data: A :class:`~pyg_dist.train.session.DistEnv` or a ``(feature_store, graph_store)`` pair.
        dim: Width of a row.
        node_types: Node types with a row each (default: every type of the folder).
        init: ``init(global_ids, dim) -> rows`` (default :func:`normal_init`: N(0, 1), like ``nn.Embedding``).
        name: Name of the table (its attribute in the feature store and its RPC callees); must be the
            same on every rank (default: ``"emb<k>"``, the k-th table built in this process).

    Example:
        >>> emb = DistEmbedding(env, 64)                                   # doctest: +SKIP
        >>> opt = SparseAdam([emb], lr=0.01)                               # doctest: +SKIP
        >>> x = emb(batch.n_id); loss = F.cross_entropy(model(x, batch.edge_index)[:bs], y); loss.backward()
        >>> opt.step(); opt.zero_grad()                                    # doctest: +SKIP
    """

    def __init__(self, data, dim: int, node_types: Optional[List[str]] = None, init: Optional[InitFn] = None,
                 name: Optional[str] = None):
        super().__init__()
        from pyg_dist.loader.dist_base import resolve_data
        fs, gs, _ = resolve_data("DistEmbedding", data, None, 0)
        self.dim = check_positive_int("DistEmbedding", "dim", dim)
        types = list(gs.node_types) if node_types is None else list(node_types)
        for t in types:
            if t not in gs.node_types:
                raise InvalidArgumentError("DistEmbedding", "node_types", node_types, f"types of {gs.node_types}")
        self.name = name if name is not None else f"emb{next(_NAMES)}"
        self.feature_store, self.book, self.partition = fs, fs.book, fs.partition
        init = init or normal_init()
        self.tables: Dict[str, Tensor] = {}
        for t in types:
            rows = init(self.book.owned_ids(t, self.partition), self.dim).share_memory_()
            fs.add_learnable(t if fs.is_hetero else None, self.name, rows)
            self.tables[t] = rows
        self._anchor = torch.zeros((), requires_grad=True)
        self._grads: List[Tuple[str, Tensor, Tensor]] = []

    def _type(self, node_type: Optional[str]) -> str:
        t = HOMO_NODE if node_type is None and not self.feature_store.is_hetero else node_type
        if t not in self.tables:
            raise InvalidArgumentError("DistEmbedding", "node_type", node_type, f"one of {sorted(self.tables)}")
        return t

    def forward(self, ids: Union[Tensor, Mapping[str, Tensor]], node_type: Optional[str] = None):
        """Rows of global ``ids`` (a tensor, with ``node_type`` for hetero) or ``{node_type: rows}`` for a
        dict of ids (``batch.n_id_dict``); differentiable."""
        if isinstance(ids, Mapping):
            keys = {t: self._type(t) for t in ids}
            fut = self.feature_store.lookup_many_async({keys[t]: v for t, v in ids.items()},
                                                       {keys[t]: [self.name] for t in ids})
            rows = fut.wait()
            return {t: _Rows.apply(self._anchor, rows[keys[t]][self.name], self, keys[t], ids[t]) for t in ids}
        t = self._type(node_type)
        rows = self.feature_store.lookup_many_async({t: ids}, {t: [self.name]}).wait()[t][self.name]
        return _Rows.apply(self._anchor, rows, self, t, ids)

    def _record(self, node_type: str, ids: Tensor, grad: Tensor) -> None:
        self._grads.append((node_type, ids.to(torch.long), grad.detach()))

    def take_grads(self) -> Dict[str, Tuple[Tensor, Tensor]]:
        """The recorded gradients since the last call, per type: ``(unique ids, summed gradient rows)``."""
        by_type: Dict[str, List[Tuple[Tensor, Tensor]]] = {}
        for t, ids, grad in self._grads:
            by_type.setdefault(t, []).append((ids, grad))
        self._grads = []
        out = {}
        for t, parts in by_type.items():
            ids = torch.cat([p[0] for p in parts])
            grads = torch.cat([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
            ordered = ids.sort().values
            if not bool((ordered[1:] == ordered[:-1]).any()):  # no repeats (a batch's n_id): nothing to sum
                out[t] = (ids, grads)
                continue
            uniq, inv = torch.unique(ids, return_inverse=True)
            out[t] = (uniq, torch.zeros(uniq.numel(), self.dim).index_add_(0, inv, grads))
        return out

    def full_rows(self, node_type: Optional[str] = None) -> Tensor:
        """This partition's rows of ``node_type`` (a view of the live table; row ``i`` = ``i``-th owned id)."""
        return self.tables[self._type(node_type)]

    def save(self, folder) -> None:
        """Writes this partition's rows to ``folder/<name>.part_<p>.pt`` (every rank its own file)."""
        from pathlib import Path
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        torch.save({t: rows for t, rows in self.tables.items()}, out / f"{self.name}.part_{self.partition}.pt")

    def load(self, folder) -> None:
        """Reads back this partition's rows written by :meth:`save` (in place: the store sees them)."""
        from pathlib import Path
        saved = torch.load(Path(folder) / f"{self.name}.part_{self.partition}.pt", weights_only=True)
        for t, rows in self.tables.items():
            if t not in saved or saved[t].shape != rows.shape:
                raise InvalidArgumentError("DistEmbedding.load", "folder", str(folder), f"a checkpoint of table "
                                           f"{self.name!r} with {tuple(rows.shape)} rows of {t!r}")
            rows.copy_(saved[t])

    def extra_repr(self) -> str:  # noqa: D102 -- torch.nn.Module's hook
        return f"name={self.name!r}, dim={self.dim}, types={sorted(self.tables)}, partition={self.partition}"


__all__ = ["DistEmbedding", "normal_init"]
