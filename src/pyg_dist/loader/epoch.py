"""Reproducible epochs: every index batch carries its own random key.

PyG's loaders let the sampler draw from torch's global generator wherever it runs (a worker, the
prefetch loop), so a batch depends on timing, concurrency and worker count. pyg_dist's loaders instead
cut each epoch with :class:`KeyedBatchSampler`: the epoch's order is a permutation drawn from
``(seed, epoch)`` and batch ``i`` gets the key ``mix(seed, epoch, i, rank)``, which the sampler hands
to every one-hop call and to negative sampling. Batch ``i`` of epoch ``e`` on rank ``r`` is therefore a
pure function of ``(seed, e, i, r)`` and the data, whatever ``num_workers``, ``persistent_workers`` or
``concurrency`` are. ``seed`` is the loader's (default: drawn once from torch's global generator when
the loader is built, so ``torch.manual_seed`` fixes it). Iterating never draws from torch's global
generator (torch's DataLoader would, once per epoch, for its workers' seeds: the loader gives it a
generator of its own), so the training step's randomness (dropout) is the same whatever the loader does.

:class:`KeyedDataLoader` slots in under PyG's ``NodeLoader`` / ``LinkLoader`` (they call
``super().__init__(range(n), collate_fn=..., **kwargs)``): it turns ``batch_size`` / ``shuffle`` /
``drop_last`` into a :class:`KeyedBatchSampler` whose batches are lists of ``(index, key)`` pairs;
:func:`split_keyed` takes them apart again in ``collate_fn``. A user's own ``sampler`` /
``batch_sampler`` is kept as given (its batches then carry no key). Before workers start, it loads the
sampling kernels in the loader's own process, so forked workers inherit them instead of each loading
them anew (about 1 s per worker and epoch with ``persistent_workers=False``).

Example:
    >>> plan = KeyedBatchSampler(5, 2, shuffle=False, drop_last=False, seed=7)
    >>> [[i for i, _ in b] for b in plan]
    [[0, 1], [2, 3], [4]]
"""
from __future__ import annotations

from typing import Iterator, List, Optional, Sequence, Tuple

import torch
from torch.utils.data import DataLoader

from pyg_dist.errors import InvalidArgumentError, check_positive_int
from pyg_dist.ops.keys import key_generator, mix, random_key

#: Word mixed into ``(seed, epoch)`` for the epoch's permutation (batch keys use the batch index).
_ORDER = -2
#: Word mixed into the seed for the generator torch's DataLoader draws its worker seeds from.
_WORKER_SEEDS = -3


class KeyedBatchSampler:
    """Index batches of an epoch, each index paired with its batch's key (see the module docstring).

    Args:
        num_items: Items per epoch.
        batch_size: Items per batch.
        shuffle: Permute the items every epoch (a permutation drawn from ``(seed, epoch)``).
        drop_last: Drop the last incomplete batch.
        seed: The loader's seed.
        rank: Mixed into every key (ranks sampling the same items still draw apart).
    """

    def __init__(self, num_items: int, batch_size: int, shuffle: bool, drop_last: bool, seed: int,
                 rank: int = 0):
        self.num_items, self.batch_size, self.shuffle = int(num_items), int(batch_size), bool(shuffle)
        self.drop_last, self.seed, self.rank = bool(drop_last), int(seed), int(rank)
        self.epoch = 0  # the epoch of the last iteration (the next one runs epoch + 1)
        self.start = 0  # the batch the next iteration starts at (resuming an epoch)

    def __len__(self) -> int:
        full, rest = divmod(self.num_items, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def order(self, epoch: int) -> torch.Tensor:
        """The item order of ``epoch`` (1-based)."""
        if not self.shuffle:
            return torch.arange(self.num_items)
        return torch.randperm(self.num_items, generator=key_generator(mix(self.seed, epoch, _ORDER)))

    def batch_key(self, epoch: int, index: int) -> int:
        """The key of batch ``index`` of ``epoch``."""
        return mix(self.seed, epoch, index, self.rank)

    def __iter__(self) -> Iterator[List[Tuple[int, int]]]:
        self.epoch += 1
        epoch, order = self.epoch, self.order(self.epoch).tolist()
        start, self.start = self.start, 0
        for i in range(start, len(self)):
            key = self.batch_key(epoch, i)
            yield [(j, key) for j in order[i * self.batch_size:(i + 1) * self.batch_size]]


class _KeyedItems:
    """The dataset of a keyed loader: item ``(index, key)`` is itself (the DataLoader's fetch is a no-op)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, item):
        return item


def split_keyed(index: Sequence) -> Tuple[List[int], Optional[int]]:
    """``(indices, key)`` of a keyed batch; ``(index, None)`` for a plain one."""
    if len(index) and isinstance(index[0], tuple):
        return [i for i, _ in index], int(index[0][1])
    return list(index), None


class KeyedDataLoader(DataLoader):
    """A ``DataLoader`` whose batches come from a :class:`KeyedBatchSampler` (see the module docstring).

    The loaders set ``_key_seed`` (``None``: drawn from torch's global generator) and ``_key_rank``
    before PyG's loader calls ``super().__init__``.
    """

    def __init__(self, dataset, **kwargs):
        self.batch_plan: Optional[KeyedBatchSampler] = None
        if kwargs.get("sampler") is None and kwargs.get("batch_sampler") is None:
            batch_size = kwargs.pop("batch_size", 1)
            if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
                raise InvalidArgumentError(type(self).__name__, "batch_size", batch_size, "a positive int")
            seed = getattr(self, "_key_seed", None)
            seed = random_key(kwargs.get("generator")) if seed is None else seed
            self.batch_plan = KeyedBatchSampler(len(dataset), batch_size, kwargs.pop("shuffle", False),
                                                kwargs.pop("drop_last", False), seed, getattr(self, "_key_rank", 0))
            kwargs["batch_sampler"] = self.batch_plan
            if kwargs.get("generator") is None:  # torch draws each iterator's worker seed from it, not from
                kwargs["generator"] = key_generator(mix(seed, _WORKER_SEEDS))  # the global generator
            dataset = _KeyedItems(len(dataset))
        super().__init__(dataset, **kwargs)

    def __getstate__(self):
        # A worker started with "spawn" unpickles the loader (its collate_fn is a bound method); torch's
        # generator state does not survive that trip through shared memory, and workers never use it.
        state = dict(self.__dict__)
        state["generator"] = None
        return state

    def __iter__(self):
        if self.num_workers > 0:  # forked workers inherit the loaded kernels instead of each loading them
            from pyg_dist.ops import warmup
            warmup()
        return super().__iter__()

    # ------------------------------------------------------------------ position (checkpoints)
    def _plan(self, where: str) -> KeyedBatchSampler:
        if self.batch_plan is None:
            raise InvalidArgumentError(f"{type(self).__name__}.{where}", "batch_sampler", "a user's sampler",
                                       "the loader's own keyed batches (no sampler= / batch_sampler=)")
        return self.batch_plan

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        """The next iteration runs ``epoch`` (1-based) from its batch ``start_batch`` on: batch ``i`` is the
        one an uninterrupted run gives (keys and order depend on ``(seed, epoch, i)`` only).

        Example:
            >>> loader.set_epoch(3, start_batch=17)   # resume epoch 3 after its 17th batch  # doctest: +SKIP
        """
        plan = self._plan("set_epoch")
        check_positive_int(f"{type(self).__name__}.set_epoch", "epoch", epoch)
        if isinstance(start_batch, bool) or not isinstance(start_batch, int) or not 0 <= start_batch <= len(plan):
            raise InvalidArgumentError(f"{type(self).__name__}.set_epoch", "start_batch", start_batch,
                                       f"an int in [0, {len(plan)}] (batches per epoch)")
        plan.epoch, plan.start = epoch - 1, start_batch

    def state_dict(self) -> dict:
        """``{"seed", "epoch", "start", "num_batches"}``: what makes the next iteration's batches (a few ints)."""
        plan = self._plan("state_dict")
        return {"seed": plan.seed, "epoch": plan.epoch, "start": plan.start, "num_batches": len(plan)}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` (same seeds per rank: the batch count must match)."""
        plan = self._plan("load_state_dict")
        if not isinstance(state, dict) or state.get("num_batches") != len(plan):
            raise InvalidArgumentError(f"{type(self).__name__}.load_state_dict", "state", state,
                                       f"a state of a loader with {len(plan)} batches per epoch")
        plan.seed, plan.epoch, plan.start = int(state["seed"]), int(state["epoch"]), int(state["start"])

    @property
    def batch_size(self):
        """Items per batch (PyG's attribute; kept when the batches are keyed)."""
        plan = getattr(self, "batch_plan", None)
        return plan.batch_size if plan is not None else self.__dict__.get("_plain_batch_size")

    @batch_size.setter
    def batch_size(self, value) -> None:
        self.__dict__["_plain_batch_size"] = value


def sampler_key(sampler, key: Optional[int]) -> dict:
    """``{"key": key}`` for pyg_dist's samplers (which take it), ``{}`` for any other sampler."""
    from pyg_dist.sampler.base import SamplerBase
    return {"key": key} if key is not None and isinstance(sampler, SamplerBase) else {}


def node_collate(loader, index):
    """PyG ``NodeLoader``'s ``collate_fn`` with the batch's key: sample the seeds at ``index`` (a keyed index
    batch); build the batch here too when ``filter_per_worker``."""
    idx, key = split_keyed(index)
    out = loader.node_sampler.sample_from_nodes(loader.input_data[idx], **sampler_key(loader.node_sampler, key))
    return loader.filter_fn(out) if loader.filter_per_worker else out


def link_collate(loader, index):
    """PyG ``LinkLoader``'s ``collate_fn`` with the batch's key: sample the seed edges at ``index`` (a keyed index
    batch); build the batch here too when ``filter_per_worker``."""
    idx, key = split_keyed(index)
    out = loader.link_sampler.sample_from_edges(loader.input_data[idx], neg_sampling=loader.neg_sampling,
                                                **sampler_key(loader.link_sampler, key))
    return loader.filter_fn(out) if loader.filter_per_worker else out


__all__ = ["KeyedBatchSampler", "KeyedDataLoader", "node_collate", "link_collate", "split_keyed", "sampler_key"]
