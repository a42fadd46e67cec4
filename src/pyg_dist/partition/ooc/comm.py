"""The out-of-core partitioner's collectives: one process (:class:`Comm`, every call a no-op) or a gloo
process group across machines (:class:`TorchComm`, under ``torchrun``).

The pipeline calls the same methods either way, so a 1-rank and an N-rank run execute one code path:
chunks are dealt round-robin (:meth:`Comm.rounds`), rows are shipped to the rank that owns them with
``all_to_all`` (:meth:`Comm.exchange`), per-node arrays are summed (:meth:`Comm.all_reduce_`) or sent by
the rank that computed them (:meth:`Comm.broadcast_`).
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np
import torch


class Comm:
    """A world of one process."""
    rank, world = 0, 1

    def mine(self, index: int) -> bool:
        """Whether item ``index`` (a chunk, a block, a partition) belongs to this rank (round-robin)."""
        return index % self.world == self.rank

    def owner(self, index: int) -> int:
        """The rank item ``index`` belongs to."""
        return index % self.world

    def rounds(self, chunks: Iterable[Tuple[int, np.ndarray, np.ndarray]]) -> Iterator[Optional[tuple]]:
        """This rank's ``chunks`` (read with ``keep=self.mine``), one per round, then ``None`` until every
        rank's ran out: each round is one collective step on every rank."""
        mine = iter(chunks)
        while True:
            chunk = next(mine, None)
            if not self.any(chunk is not None):
                return
            yield chunk

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` is true on some rank."""
        return flag

    def exchange(self, dest: np.ndarray, cols: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Ships row ``i`` of every column to rank ``dest[i]``; returns the rows this rank received, ordered
        by sending rank, each sender's rows in their original order."""
        return cols

    def all_reduce_(self, array: np.ndarray) -> np.ndarray:
        """Sums ``array`` over the ranks, in place."""
        return array

    def broadcast_(self, array: np.ndarray, src: int) -> np.ndarray:
        """Overwrites ``array`` (contiguous) with rank ``src``'s, in place."""
        return array

    def all_gather(self, obj: Any) -> List[Any]:
        """Every rank's ``obj`` (pickled), in rank order."""
        return [obj]

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` on every rank."""
        return obj

    def barrier(self) -> None:
        """Waits for every rank."""

    def move_to_root(self, array: Optional[np.ndarray], src: int) -> Optional[np.ndarray]:
        """Rank ``src``'s int64 ``array`` arrives on rank 0 (returned there; ``None`` elsewhere)."""
        return array


class TorchComm(Comm):
    """A world of ``torch.distributed`` ranks (gloo); the process group must be initialised."""

    def __init__(self):
        import torch.distributed as dist
        self.dist = dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def any(self, flag: bool) -> bool:
        """See :meth:`Comm.any`."""
        t = torch.tensor([int(flag)])
        self.dist.all_reduce(t)
        return bool(t.item())

    def exchange(self, dest: np.ndarray, cols: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """See :meth:`Comm.exchange`."""
        order = np.argsort(dest, kind="stable")
        send = torch.from_numpy(np.bincount(dest, minlength=self.world).astype(np.int64))
        recv = torch.empty_like(send)
        self.dist.all_to_all_single(recv, send)
        out = {}
        for name, values in cols.items():
            values = np.ascontiguousarray(values[order])
            got = torch.empty((int(recv.sum()),) + values.shape[1:], dtype=torch.from_numpy(values[:0]).dtype)
            self.dist.all_to_all_single(got, torch.from_numpy(values), recv.tolist(), send.tolist())
            out[name] = got.numpy()
        return out

    def all_reduce_(self, array: np.ndarray) -> np.ndarray:
        """See :meth:`Comm.all_reduce_`."""
        self.dist.all_reduce(torch.from_numpy(array))
        return array

    def broadcast_(self, array: np.ndarray, src: int) -> np.ndarray:
        """See :meth:`Comm.broadcast_`."""
        self.dist.broadcast(torch.from_numpy(array), src)
        return array

    def all_gather(self, obj: Any) -> List[Any]:
        """See :meth:`Comm.all_gather`."""
        out: List[Any] = [None] * self.world
        self.dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """See :meth:`Comm.broadcast_object`."""
        box = [obj]
        self.dist.broadcast_object_list(box, src)
        return box[0]

    def barrier(self) -> None:
        """See :meth:`Comm.barrier`."""
        self.dist.barrier()

    def move_to_root(self, array: Optional[np.ndarray], src: int) -> Optional[np.ndarray]:
        """See :meth:`Comm.move_to_root`."""
        if self.rank == src and src != 0:
            t = torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64))
            self.dist.send(torch.tensor([t.numel()]), 0)
            self.dist.send(t, 0)
            return None
        if self.rank == 0 and src != 0:
            n = torch.empty(1, dtype=torch.long)
            self.dist.recv(n, src)
            t = torch.empty(int(n.item()), dtype=torch.long)
            self.dist.recv(t, src)
            return t.numpy()
        return array if self.rank == 0 else None


def world_comm() -> Comm:
    """:class:`TorchComm` when a process group of more than one rank is initialised, else :class:`Comm`."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return TorchComm()
    return Comm()
