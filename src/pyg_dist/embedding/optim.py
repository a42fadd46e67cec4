"""Sparse optimizers for :class:`~pyg_dist.embedding.DistEmbedding`, applied where the rows live.

After ``backward()`` each trainer holds ``(ids, gradient rows)`` per table; :meth:`step` sums the
duplicates, applies its own partition's share and sends every other share to its owner, one request per
owner (remote work started first). Optimizer state (Adagrad's sum of squares; Adam's moments and step
counts) is kept per row at the owner.

Consistency: by default Hogwild-style, as DistDGL: an owner applies each trainer's update when it
arrives, so concurrent updates of one row from two trainers are both applied, in no defined order; the
remote pushes of a step are awaited at the next :meth:`step` (they overlap the next batch). With
``sync=True`` every step is exact: owners sum the gradients of all trainers and apply them once between
two barriers, which equals a single-process ``nn.Embedding(sparse=True)`` step on the union of the
batches (the test's oracle).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from pyg_dist.embedding.module import DistEmbedding
from pyg_dist.errors import InvalidArgumentError, PyGDistError

PUSH_OP = "pyg_dist.embedding_push"
_NO_POS = torch.empty(0, dtype=torch.int64)


@dataclass(frozen=True)
class GradPush:
    """Gradient rows for ids one partition owns (ids unique)."""
    partition: int
    table: str
    node_type: str
    ids: Tensor
    grads: Tensor


class SparseOptimizer:
    """Base of the sparse optimizers: routing, pushing, serving and the exact (``sync``) mode.

    Args:
        embeddings: The :class:`DistEmbedding` tables to update (built on every rank in the same order).
        lr: Learning rate.
        sync: Exact steps (barrier per step) instead of Hogwild-style updates.
    """

    def __init__(self, embeddings: Sequence[DistEmbedding], lr: float, sync: bool = False):
        import torch.distributed as dist

        from pyg_dist import rpc
        where = type(self).__name__
        self.embeddings = list(embeddings) if not isinstance(embeddings, DistEmbedding) else [embeddings]
        if not self.embeddings or not all(isinstance(e, DistEmbedding) for e in self.embeddings):
            raise InvalidArgumentError(where, "embeddings", embeddings, "a list of DistEmbedding")
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
            raise InvalidArgumentError(where, "lr", lr, "a positive number")
        if not isinstance(sync, bool):
            raise InvalidArgumentError(where, "sync", sync, "a bool")
        self.lr, self.sync = float(lr), sync
        self._by_name = {e.name: e for e in self.embeddings}
        self.state = {e.name: {t: self._init_state(rows) for t, rows in e.tables.items()} for e in self.embeddings}
        self._lock = threading.Lock()
        self._acc: Dict[Tuple[str, str], List[Tuple[Tensor, Tensor]]] = {}
        self._pending: List = []
        for e in self.embeddings:
            rpc.register_callee(f"{PUSH_OP}.{e.name}", self._serve, replace=True)
        if dist.is_available() and dist.is_initialized():
            dist.barrier()  # every owner serves before anyone pushes

    # ---------------------------------------------------------------- subclass interface
    def _init_state(self, rows: Tensor) -> Dict[str, Tensor]:
        raise NotImplementedError

    def _update(self, param: Tensor, state: Dict[str, Tensor], rows: Tensor, grad: Tensor, pos: Tensor) -> None:
        """Applies ``grad[pos[i]]`` (``pos`` empty: ``grad[i]``) to the unique local row ``rows[i]``, in place."""
        raise NotImplementedError

    # ---------------------------------------------------------------- stepping
    def zero_grad(self) -> None:
        """Drops the recorded gradients of every table (call it like ``optimizer.zero_grad()``)."""
        for e in self.embeddings:
            e._grads = []

    def step(self) -> None:
        """Applies the recorded gradients: local share here, remote shares pushed to their owners."""
        from pyg_dist.store.routing import route_ids
        self.flush()
        futures = []
        for e in self.embeddings:
            for t, (ids, grads) in e.take_grads().items():
                route = route_ids(e.book, e.partition, t, ids)
                for p, pos in route.remote.items():  # remote work first
                    futures.append(self._push(p, GradPush(p, e.name, t, ids[pos], grads[pos])))
                self._take(e.name, t, route.local_rows, grads, route.local_pos)
        if not self.sync:
            self._pending = futures
            return
        self._pending = futures
        self.flush()
        import torch.distributed as dist
        dist.barrier()  # every push of this step has arrived
        with self._lock:
            acc, self._acc = self._acc, {}
        for (name, t), parts in acc.items():
            rows = torch.cat([p[0] for p in parts])
            uniq, inv = torch.unique(rows, return_inverse=True)
            summed = torch.zeros(uniq.numel(), parts[0][1].size(1)).index_add_(0, inv, torch.cat([p[1] for p in parts]))
            self._apply(name, t, uniq, summed)
        dist.barrier()  # nobody reads rows of the next step before every owner applied this one

    def flush(self) -> None:
        """Waits for the pushes of the last step (raises :class:`~pyg_dist.errors.RemoteCallError` if an
        owner failed)."""
        pending, self._pending = self._pending, []
        for fut in pending:
            fut.wait()

    def _push(self, partition: int, push: GradPush):
        from pyg_dist import rpc
        return rpc.call_async(partition, f"{PUSH_OP}.{push.table}", push)

    def _take(self, name: str, t: str, rows: Tensor, grads: Tensor, pos: Optional[Tensor] = None) -> None:
        """Applies (or, with ``sync``, keeps for the step's end) ``grads[pos]`` for local ``rows``."""
        if not rows.numel():
            return
        if self.sync:
            with self._lock:
                self._acc.setdefault((name, t), []).append((rows, grads if pos is None else grads[pos]))
        else:
            self._apply(name, t, rows, grads, pos)

    def _apply(self, name: str, t: str, rows: Tensor, grads: Tensor, pos: Optional[Tensor] = None) -> None:
        """Updates the rows (Hogwild: no lock; updates running at once on one row may interleave)."""
        rows = rows.to(torch.int64)
        order = torch.argsort(rows)  # ascending rows: the table, moments and sums are walked in memory order
        rows, pos = rows[order], (order if pos is None else pos.to(torch.int64)[order])
        self._update(self._by_name[name].tables[t], self.state[name][t], rows, grads, pos)

    def _serve(self, push: GradPush) -> None:
        e = self._by_name.get(push.table)
        if e is None or push.partition != e.partition or push.node_type not in e.tables:
            raise PyGDistError(f"gradient push for table {push.table!r} / type {push.node_type!r} / partition "
                               f"{push.partition} reached partition {e.partition if e else '?'} (same tables on "
                               "every rank?)")
        if push.ids.numel() and not bool((e.book.owner(push.node_type, push.ids) == e.partition).all()):
            raise PyGDistError(f"gradient push names ids partition {e.partition} does not own")
        self._take(push.table, push.node_type, e.book.to_local(push.node_type, push.ids), push.grads)

    # ---------------------------------------------------------------- checkpoints
    def save(self, folder) -> Path:
        """Writes this partition's optimizer state to ``folder/<table>.<optimizer>.part_<p>.pt``."""
        self.flush()
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        for e in self.embeddings:
            torch.save(self.state[e.name], out / f"{e.name}.{type(self).__name__}.part_{e.partition}.pt")
        return out

    def load(self, folder) -> None:
        """Reads back what :meth:`save` wrote (same tables, same partition)."""
        for e in self.embeddings:
            saved = torch.load(Path(folder) / f"{e.name}.{type(self).__name__}.part_{e.partition}.pt",
                               weights_only=True)
            for t, st in self.state[e.name].items():
                for k, v in st.items():
                    v.copy_(saved[t][k])


class SparseAdagrad(SparseOptimizer):
    """Adagrad on the rows a batch touched (``torch.optim.Adagrad`` with sparse gradients, no lr decay)."""

    def __init__(self, embeddings, lr: float = 0.01, eps: float = 1e-10, sync: bool = False):
        self.eps = eps
        super().__init__(embeddings, lr, sync)

    def _init_state(self, rows: Tensor) -> Dict[str, Tensor]:
        return {"sum": torch.zeros_like(rows).share_memory_()}

    def _update(self, param, state, rows, grad, pos) -> None:
        kernel = _kernel("adagrad_rows", param, grad)
        if kernel is not None:
            kernel(param.numpy(), state["sum"].numpy(), rows.numpy(), grad.numpy(), pos.numpy(), self.lr, self.eps)
            return
        grad = grad if not pos.numel() else grad[pos]
        s = state["sum"].index_select(0, rows).add_(grad * grad)
        state["sum"].index_copy_(0, rows, s)
        param.index_add_(0, rows, grad / s.sqrt_().add_(self.eps), alpha=-self.lr)


class SparseAdam(SparseOptimizer):
    """Adam on the rows a batch touched (``torch.optim.SparseAdam``), with a step count per row."""

    def __init__(self, embeddings, lr: float = 0.001, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, sync: bool = False):
        self.betas, self.eps = betas, eps
        super().__init__(embeddings, lr, sync)

    def _init_state(self, rows: Tensor) -> Dict[str, Tensor]:
        return {"exp_avg": torch.zeros_like(rows).share_memory_(),
                "exp_avg_sq": torch.zeros_like(rows).share_memory_(),
                "step": torch.zeros(rows.size(0), dtype=torch.long).share_memory_()}

    def _update(self, param, state, rows, grad, pos) -> None:
        b1, b2 = self.betas
        kernel = _kernel("adam_rows", param, grad)
        if kernel is not None:
            kernel(param.numpy(), state["exp_avg"].numpy(), state["exp_avg_sq"].numpy(), state["step"].numpy(),
                   rows.numpy(), grad.numpy(), pos.numpy(), self.lr, b1, b2, self.eps)
            return
        grad = grad if not pos.numel() else grad[pos]
        step = state["step"].index_select(0, rows) + 1
        state["step"].index_copy_(0, rows, step)
        m = state["exp_avg"].index_select(0, rows)
        v = state["exp_avg_sq"].index_select(0, rows)
        m.add_((grad - m) * (1 - b1))
        v.add_((grad * grad - v) * (1 - b2))
        state["exp_avg"].index_copy_(0, rows, m)
        state["exp_avg_sq"].index_copy_(0, rows, v)
        stepf = step.to(grad.dtype).unsqueeze(1)
        size = self.lr * torch.sqrt(1 - b2 ** stepf) / (1 - b1 ** stepf)
        param.index_add_(0, rows, size * m / (v.sqrt() + self.eps), alpha=-1.0)


def _kernel(name: str, param: Tensor, grad: Tensor):
    """The fused numba update ``name`` when numba is on and the tensors suit it (else None: torch). Any
    gradient strides work (a sum's gradient is an expanded view: it is read in place, never copied)."""
    from pyg_dist.ops.backend import numba_available
    if not (numba_available() and param.dtype == grad.dtype == torch.float32 and param.is_contiguous()
            and param.device.type == "cpu" and grad.device.type == "cpu"):
        return None
    from pyg_dist.ops import _numba_optim
    return getattr(_numba_optim, name)


__all__ = ["SparseOptimizer", "SparseAdagrad", "SparseAdam", "GradPush", "PUSH_OP"]
