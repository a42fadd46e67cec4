"""A run's start-up on every rank (:func:`pyg_dist.train.session.dist_session`): joining the process group while
watching for a peer that failed first, and opening the partition, bounded by the start-up timeout, every rank told
when any rank failed, and every rank checked to have opened the same partitioning."""
from __future__ import annotations

import threading
import time
from typing import Optional

from pyg_dist.context import DistContext
from pyg_dist.errors import PyGDistError

#: Seconds between looks for a peer's published failure line while the process group forms.
LOOK_EVERY = 0.5


#: Bytes per second a rank is assumed to open (read, check) its partition at, at the least: the start-up bound
#: grows by the largest partition's bytes at this rate (:func:`open_bound`).
OPEN_BYTES_PER_S = 100e6


def open_bound(timeout: float, part_bytes: int) -> float:
    """Seconds every rank allows for opening the partitions: ``timeout`` plus the largest partition's bytes
    (``part_bytes``: :func:`pyg_dist.format.digests.largest_part_bytes`, from META.json's file list) at
    :data:`OPEN_BYTES_PER_S`. The same on every rank (the same META), so ranks that open their partitions fast
    wait for one that opens a larger one (in the collective after the open) instead of timing out (a folder
    without a file list: ``timeout``)."""
    return float(timeout) + part_bytes / OPEN_BYTES_PER_S


def join_group(backend: str, timeout: float, ctx: DistContext, collective: Optional[float] = None) -> None:
    """:func:`pyg_dist.group.init_process_group` within ``timeout`` seconds, while looking for a peer that failed
    before it arrived (a bad setting on another machine): its published line (:mod:`pyg_dist.rpc.verdict`) ends
    the wait at once as a :class:`~pyg_dist.errors.PeerFailedError`; the bound, as an
    :class:`~pyg_dist.errors.RpcTimeoutError` naming the ranks that never arrived. ``collective``: the group's
    collective timeout until start-up ends (default ``timeout``; :func:`open_bound` while partitions open)."""
    from pyg_dist.group import init_process_group
    from pyg_dist.rpc import verdict

    store = verdict.world_store() if ctx.world_size > 1 else None
    collective = max(timeout, collective or timeout)
    if store is not None:
        _join_watched(store, backend, timeout, collective, ctx)
    else:  # one rank, or no store to look in (outside torchrun): torch's own bound holds
        init_process_group(backend, collective, ctx)


def _join_watched(store, backend: str, timeout: float, collective: float, ctx: DistContext) -> None:
    """:func:`join_group` where the job's store can be read: the group joins in a thread while this one looks
    for a published failure line every :data:`LOOK_EVERY` seconds and names the ranks that never arrived."""
    from pyg_dist.errors import PeerFailedError, RpcTimeoutError
    from pyg_dist.group import init_process_group
    from pyg_dist.rpc import verdict

    _mark(store, f"arrived/{ctx.rank}")
    box: dict = {}
    thread = threading.Thread(target=_run_into, args=(box, init_process_group, backend, collective, ctx),
                              name="pyg_dist-rendezvous", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while thread.is_alive():
        thread.join(LOOK_EVERY)
        if not thread.is_alive():
            break
        said = verdict.any_said(ctx.world_size, ctx.rank)
        if said:
            raise PeerFailedError("start-up (the process group's rendezvous)", "another rank", "it did not arrive",
                                  said=said)
        if time.monotonic() > deadline:
            missing = [r for r in range(ctx.world_size) if not _marked(store, f"arrived/{r}")]
            raise RpcTimeoutError(f"rank {ctx.rank}: the process group did not form within {timeout:g} s "
                                  f"(TrainConfig.timeout); ranks {missing or '(all arrived)'} never reached it, and "
                                  "none published why (killed before start-up, or another MASTER_ADDR/MASTER_PORT)")
    if "error" in box:
        raise box["error"]


def _run_into(box: dict, fn, *args) -> None:
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 -- re-raised by the waiting thread
        box["error"] = exc


def _mark(store, key: str) -> None:
    try:
        store.set(key, b"1")
    except Exception:  # noqa: BLE001 -- only the timeout's message loses a name
        pass


def _marked(store, key: str) -> bool:
    try:
        return bool(store.check([key]))
    except Exception:  # noqa: BLE001
        return False


def open_everywhere(config, ctx: DistContext, bound: Optional[float] = None):
    """Opens this rank's partition (every check of :mod:`pyg_dist.store.folder`, within ``bound`` seconds,
    default ``config.timeout``: :func:`open_bound`, else a ``PartitionFormatError`` saying so); one ``all_gather`` then
    tells every rank whether any rank failed, so a bad file on one machine stops all of them now, before
    RPC, instead of leaving the others to time out in the rendezvous."""
    import torch.distributed as dist

    from pyg_dist.errors import PartitionFormatError, RpcTimeoutError
    from pyg_dist.format import folder_id
    from pyg_dist.store import load_stores
    from pyg_dist.timeouts import run_bounded

    stores, ident = None, None
    problem: Optional[PyGDistError] = None
    bound = config.timeout if bound is None else bound
    try:  # bounded like the rest of start-up: a file system that stops answering is no silent hang
        stores = run_bounded(lambda: load_stores(config.partition_dir, ctx=ctx, mmap=config.mmap,
                                                 verify=config.verify), bound, "opening the partition")
        ident = folder_id(stores[1].partition_meta)
    except RpcTimeoutError:
        problem = PartitionFormatError(config.partition_dir, f"opening partition {ctx.partition} did not finish within "
                                       f"{bound:g} s (TrainConfig.timeout plus the largest partition's bytes at "
                                       f"{OPEN_BYTES_PER_S / 1e6:g} MB/s): a file system that does not answer?")
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


__all__ = ["open_everywhere", "check_same_partitioning", "open_bound", "join_group", "OPEN_BYTES_PER_S"]
