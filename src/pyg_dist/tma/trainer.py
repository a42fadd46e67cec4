"""The trainer loop of time-based model aggregation, the averaging, and the evaluator.

Averaging: every trainer holds a full model; an aggregation is one ``all_reduce`` (sum) of all
parameters flattened into one tensor, divided by the number of trainers, over the process group
(gloo on CPU, nccl on GPU). Every trainer receives the same bits, so after a round they hold identical
models; optimizer state stays local, as in the paper. An ``all_reduce`` among the trainers was chosen
over send/recv to a server process: it moves ``2 (W-1)/W`` model sizes per trainer per round instead of
funnelling ``W`` models through one process, and needs no extra process (the "server" is only the
coordinating thread of :mod:`.schedule`).

Evaluator: on rank 0 a thread scores a snapshot of every aggregated model with the user's
``evaluate(model) -> float`` while training goes on, and keeps the best (highest) one.
"""
from __future__ import annotations

import copy
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch

from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.tma.schedule import Coordinator, RoundClock, TMAAbortedError, TMAConfig, connect_store

LOG = logging.getLogger("pyg_dist")


class AggregationError(PyGDistError, RuntimeError):
    """An aggregation round could not complete: a trainer died or left (names the round)."""


def average_parameters(model: torch.nn.Module, group=None) -> int:
    """Replaces every parameter by its mean over the trainers (one ``all_reduce``); returns the bytes
    this trainer sends (ring all-reduce: ``2 (W-1)/W`` times the model size)."""
    import torch.distributed as dist
    params = [p for p in model.parameters()]
    flat = torch.nn.utils.parameters_to_vector([p.detach() for p in params])
    world = dist.get_world_size(group)
    dist.all_reduce(flat, group=group)
    flat /= world
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(flat, params)
    return int(flat.numel() * flat.element_size() * 2 * (world - 1) / max(world, 1))


def average_optimizer_state(optimizer: torch.optim.Optimizer, group=None) -> int:
    """Replaces the optimizer's floating state tensors (e.g. Adam's ``exp_avg`` / ``exp_avg_sq``) by their
    mean over the trainers (one ``all_reduce``); step counters stay local. Returns the bytes sent."""
    import torch.distributed as dist
    tensors = [v for state in optimizer.state.values() for k, v in sorted(state.items())
               if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() > 0]
    if not tensors:
        return 0
    flat = torch.cat([t.reshape(-1) for t in tensors])
    world = dist.get_world_size(group)
    dist.all_reduce(flat, group=group)
    flat /= world
    offset = 0
    for t in tensors:
        t.copy_(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()
    return int(flat.numel() * flat.element_size() * 2 * (world - 1) / max(world, 1))


class Evaluator(threading.Thread):
    """Scores snapshots of aggregated models in the background; keeps the best (ties: earliest)."""

    def __init__(self, evaluate: Callable[[torch.nn.Module], float]):
        super().__init__(name="pyg_dist-tma-evaluator", daemon=True)
        self.evaluate = evaluate
        self.jobs: "queue.Queue[Optional[Tuple[int, torch.nn.Module]]]" = queue.Queue()
        self.history: List[Tuple[int, float]] = []
        self.best: Optional[Tuple[int, float, Dict[str, torch.Tensor]]] = None
        self.error: Optional[BaseException] = None

    def submit(self, round_: int, model: torch.nn.Module) -> None:
        """Queues a copy of ``model`` as aggregated in round ``round_``."""
        self.jobs.put((round_, copy.deepcopy(model)))

    def run(self) -> None:
        """Scores queued snapshots until :meth:`finish` (errors are re-raised there)."""
        while True:
            job = self.jobs.get()
            if job is None:
                return
            round_, model = job
            try:
                model.eval()
                with torch.no_grad():
                    metric = float(self.evaluate(model))
            except BaseException as exc:  # noqa: BLE001 -- re-raised by finish() in the trainer thread
                self.error = exc
                return
            self.history.append((round_, metric))
            LOG.info("tma round=%d val_metric=%.4f", round_, metric)
            if self.best is None or metric > self.best[1]:
                self.best = (round_, metric, {k: v.clone() for k, v in model.state_dict().items()})

    def finish(self) -> None:
        """Waits for every queued snapshot; raises what ``evaluate`` raised."""
        self.jobs.put(None)
        self.join()
        if self.error is not None:
            raise self.error


@dataclass
class TMAResult:
    """What one trainer did: its steps and epochs, the aggregation rounds, bytes sent, wall time; on
    rank 0 with an ``evaluate`` function also every round's metric and the best round's weights."""
    steps: int = 0
    epochs: int = 0
    rounds: int = 0
    bytes_sent: int = 0
    seconds: float = 0.0
    history: List[Tuple[int, float]] = field(default_factory=list)
    best_round: Optional[int] = None
    best_metric: Optional[float] = None
    best_state: Optional[Dict[str, torch.Tensor]] = None


def _aggregate(model, result: TMAResult, count: int, evaluator: Optional[Evaluator], optimizer=None) -> None:
    for _ in range(count):
        try:
            result.bytes_sent += average_parameters(model)
            if optimizer is not None:
                result.bytes_sent += average_optimizer_state(optimizer)
        except RuntimeError as exc:
            raise AggregationError(f"aggregation round {result.rounds + 1} failed: a trainer died or left "
                                   f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from exc
        result.rounds += 1
        if evaluator is not None:
            evaluator.submit(result.rounds, model)


def _check_world(where: str):
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        raise InvalidArgumentError(where, "process group", None, "initialised (torchrun + init_process_group, "
                                   "or pyg_dist.tma.tma_session)")
    return dist.get_rank(), dist.get_world_size()


def run_tma(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: Iterable,
            train_step: Callable[[torch.nn.Module, Any], torch.Tensor], config: TMAConfig,
            evaluate: Optional[Callable[[torch.nn.Module], float]] = None) -> TMAResult:
    """Trains ``model`` on this trainer's ``loader`` (repeated epochs) with time-based aggregation.

    Every trainer calls it with its own local loader; they start from rank 0's weights. ``train_step``
    returns the loss of one batch (``backward`` and ``optimizer.step`` are done here).

    Args:
        model: This trainer's model.
        optimizer: Its optimizer (the state stays local: only parameters are averaged).
        loader: Batches of this trainer's local graph (e.g. :func:`local_subgraph` + ``NeighborLoader``).
        train_step: ``(model, batch) -> loss``.
        config: The schedule (:class:`TMAConfig`).
        evaluate: ``model -> metric`` (higher is better), run on rank 0 for every aggregated model.

    Returns:
        A :class:`TMAResult`; after the last round every trainer holds the same (final) weights.

    Raises:
        AggregationError: a trainer died or left during a round.
        TMAAbortedError: another trainer failed (its rank and reason are named).
    """
    import torch.distributed as dist
    rank, _ = _check_world("run_tma")
    if not isinstance(config, TMAConfig):
        raise InvalidArgumentError("run_tma", "config", config, "a TMAConfig")
    with torch.no_grad():
        flat = torch.nn.utils.parameters_to_vector(list(model.parameters())).detach().clone()
        dist.broadcast(flat, 0)  # one starting point for everyone
        torch.nn.utils.vector_to_parameters(flat, list(model.parameters()))
    store = connect_store(config.timeout) if config.time_based else None
    coordinator = _start(store, config, rank)
    clock = RoundClock(config, store, coordinator)
    evaluator = Evaluator(evaluate) if evaluate is not None and rank == 0 else None
    if evaluator is not None:
        evaluator.start()
    result, start = TMAResult(), time.perf_counter()
    try:
        _loop(model, optimizer, loader, train_step, clock, result, evaluator)
    except BaseException as exc:
        clock.abort(rank, f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if coordinator is not None:
            coordinator.cancelled.set()
    result.seconds = time.perf_counter() - start
    if evaluator is not None:
        evaluator.finish()
        result.history = list(evaluator.history)
        if evaluator.best is not None:
            result.best_round, result.best_metric, result.best_state = evaluator.best
    return result


def _start(store, config: TMAConfig, rank: int) -> Optional[Coordinator]:
    import torch.distributed as dist
    if store is not None and rank == 0:
        store.set("round", "0")
    dist.barrier()  # the counter exists before anyone reads it
    if store is None or rank != 0:
        return None
    assert config.interval is not None and config.total_time is not None  # time-based
    coordinator = Coordinator(store, config.interval, config.total_time)
    coordinator.start()
    return coordinator


def _loop(model, optimizer, loader, train_step, clock: RoundClock, result: TMAResult,
          evaluator: Optional[Evaluator]) -> None:
    while True:
        stepped_any = False
        for batch in loader:
            model.train()
            optimizer.zero_grad()
            loss = train_step(model, batch)
            loss.backward()
            optimizer.step()
            result.steps += 1
            stepped_any = True
            due, stop = clock.after_step()
            _aggregate(model, result, due, evaluator, optimizer if clock.config.average_optimizer else None)
            if stop:
                return
        result.epochs += 1
        if not stepped_any:  # an empty local loader still takes part in every round
            if not clock.config.time_based:
                raise InvalidArgumentError("run_tma", "loader", loader, "a loader with at least one batch "
                                           "(step-based schedules count steps)")
            time.sleep(0.01)
            due, stop = clock.after_step(stepped=False)
            _aggregate(model, result, due, evaluator, optimizer if clock.config.average_optimizer else None)
            if stop:
                return


__all__ = ["run_tma", "average_parameters", "average_optimizer_state", "TMAResult", "AggregationError",
           "TMAAbortedError", "Evaluator"]
