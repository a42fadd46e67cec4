"""What the ranks agree on when they resume from a checkpoint (:mod:`pyg_dist.train.checkpoint`): the newest
step every rank completed and can read, the world size that wrote it, and, for replicated models, that every
replica loaded the same state. Each is one ``all_gather_object``, and every rank reaches the same verdict, so a
problem on one rank stops every rank with the same :class:`~pyg_dist.errors.CheckpointError` (no rank is left
waiting in a collective).

Example:
    >>> step = agree_latest([3, 6], world_size=2)                                    # doctest: +SKIP
    >>> check_replicas(state_digest([model.state_dict()]), 2, folder)                # doctest: +SKIP
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, List, Optional, Tuple

from pyg_dist.errors import CheckpointError
from pyg_dist.train.checkpoint_files import NEW_DIRECTORY

LOG = logging.getLogger("pyg_dist")


def world() -> Tuple[int, int]:
    """``(rank, world size)`` of the process group, ``(0, 1)`` without one."""
    import torch.distributed as dist
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def barrier() -> None:
    """A barrier of the process group (none alone)."""
    import torch.distributed as dist
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def gather(obj: Any, world_size: int) -> List[Any]:
    """Every rank's ``obj``, by rank (one ``all_gather_object``; ``[obj]`` alone)."""
    if world_size == 1:
        return [obj]
    import torch.distributed as dist
    every: List[Any] = [None] * world_size
    dist.all_gather_object(every, obj)
    return every


def gather_problems(problem: Optional[str], world_size: int) -> List[Tuple[int, str]]:
    """``[(rank, problem)]`` of every rank that reported one."""
    return [(rank, text) for rank, text in enumerate(gather(problem, world_size)) if text]


def raise_problems(problem: Optional[str], world_size: int) -> None:
    """Raises, on every rank, a :class:`CheckpointError` with every rank's problem, when any rank has one."""
    bad = gather_problems(problem, world_size)
    if len(bad) == 1:
        raise CheckpointError(f"rank {bad[0][0]}: {bad[0][1]}")
    if bad:
        raise CheckpointError("; ".join(f"rank {rank}: {text}" for rank, text in bad))


def agree_latest(mine: List[int], world_size: int, directory: Path) -> Optional[int]:
    """The newest step in every rank's list, or ``None``: then, when some ranks have steps and others none, a
    WARNING naming them (a run started afresh although ``directory`` holds checkpoints)."""
    every = gather(mine, world_size)
    common = set(mine)
    for steps in every:
        common &= set(steps)
    if not common and any(every):
        LOG.warning("rank %d: no checkpoint in %s that every rank completed (steps by rank: %s): starting afresh; "
                    "a checkpoint of another number of ranks written before markers recorded it looks like this: "
                    "start the job with that many ranks to resume it", world()[0], directory,
                    dict(enumerate(sorted(steps) for steps in every)))
    return max(common) if common else None


def check_world_size(found: Optional[Tuple[Path, int]], world_size: int) -> None:
    """Every rank's ``(folder, world size)`` of the newest checkpoint it sees
    (:func:`~pyg_dist.train.checkpoint_files.newest_world_size`); a :class:`CheckpointError` on every rank when
    any of them was written by another number of ranks than ``world_size``."""
    for seen in gather(None if found is None else (str(found[0]), found[1]), world_size):
        if seen is not None and seen[1] != world_size:
            raise CheckpointError(f"{seen[0]} was written by {seen[1]} ranks but this run has {world_size}: start "
                                  f"the job with {seen[1]} ranks to resume from it, {NEW_DIRECTORY}")


def check_replicas(digest: str, world_size: int, folder: Path) -> None:
    """A :class:`CheckpointError` on every rank naming the ranks whose model and optimizer state digest differs
    from rank 0's after resuming from ``folder`` (replicas of a DDP model must be equal)."""
    every = gather(digest, world_size)
    odd = [rank for rank, d in enumerate(every) if d != every[0]]
    if odd:
        shown = ", ".join(f"rank {rank}: {d}" for rank, d in enumerate(every))
        raise CheckpointError(f"after resuming from {folder}, the model and optimizer state of ranks {odd} differs "
                              f"from rank 0's ({shown}), but the model is replicated (DDP): a rank file was "
                              f"altered or comes from another run; {NEW_DIRECTORY}")
