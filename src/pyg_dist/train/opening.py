"""Opening a run's partition on every rank (:func:`pyg_dist.train.session.dist_session`'s first step after the
process group): bounded by the start-up timeout, every rank told when any rank failed, and every rank checked to
have opened the same partitioning."""
from __future__ import annotations

from typing import Optional

from pyg_dist.context import DistContext
from pyg_dist.errors import PyGDistError


def open_everywhere(config, ctx: DistContext):
    """Opens this rank's partition (every check of :mod:`pyg_dist.store.folder`, within ``config.timeout``
    seconds, else a ``PartitionFormatError`` saying so); one ``all_gather`` then
    tells every rank whether any rank failed, so a bad file on one machine stops all of them now, before
    RPC, instead of leaving the others to time out in the rendezvous."""
    import torch.distributed as dist

    from pyg_dist.errors import PartitionFormatError, RpcTimeoutError
    from pyg_dist.format import folder_id
    from pyg_dist.rpc.transport import run_bounded
    from pyg_dist.store import load_stores

    stores, ident = None, None
    problem: Optional[PyGDistError] = None
    try:  # bounded like the rest of start-up: a file system that stops answering is no silent hang
        stores = run_bounded(lambda: load_stores(config.partition_dir, ctx=ctx, mmap=config.mmap,
                                                 verify=config.verify), config.timeout, "opening the partition")
        ident = folder_id(stores[1].partition_meta)
    except RpcTimeoutError:
        problem = PartitionFormatError(config.partition_dir, f"opening partition {ctx.partition} did not finish within "
                                       f"{config.timeout:g} s (TrainConfig.timeout, the start-up bound): a file "
                                       "system that does not answer?")
    except PyGDistError as exc:
        problem = exc
    if dist.is_initialized() and dist.get_world_size() > 1:
        every: list = [None] * dist.get_world_size()
        dist.all_gather_object(every, (None if problem is None else f"{type(problem).__name__}: {problem}", ident))
        bad = [(rank, text) for rank, (text, _) in enumerate(every) if text]
        if bad and problem is None:
            rank, text = bad[0]
            raise PartitionFormatError(config.partition_dir, f"rank {rank} could not open its partition: {text}")
        if problem is None:  # a rank that failed to open has no id: its own error is raised below
            check_same_partitioning(config.partition_dir, [i for _, i in every])
    if problem is not None:
        raise problem
    return stores


def check_same_partitioning(folder, ids) -> None:
    """Every rank opened the same partitioning (``ids``: each rank's :func:`~pyg_dist.format.folder_id`),
    else one :class:`PartitionFormatError` naming the ranks that differ from rank 0 and both ids."""
    from pyg_dist.errors import PartitionFormatError
    odd = [rank for rank, i in enumerate(ids) if i != ids[0]]
    if odd:
        others = sorted({ids[r] for r in odd})
        raise PartitionFormatError(folder, f"ranks {odd} opened a different partitioning ({', '.join(others)}) than "
                                   f"rank 0 ({ids[0]}): the machines' folders come from different partitioner "
                                   "runs; copy the same folder to every machine")


__all__ = ["open_everywhere", "check_same_partitioning"]
