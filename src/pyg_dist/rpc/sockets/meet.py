"""How ``sockets`` members find each other: their entries in the world's rendezvous store, read back checked.

Each member takes the next generation of its own counter (``pyg_dist/sockets/gen/<rpc rank>``: a process that
re-initialises on the same store gets a fresh key space), publishes ``host port public-key signature``
(:meth:`~pyg_dist.rpc.auth.Keyring.entry`) under ``pyg_dist/sockets/<gen>/addr/<rpc rank>``, and waits for every
member's entry with one blocking store wait at a time (no polling that grows with the square of the world).
While it waits, every few seconds it looks for what would make the wait hopeless and says so at once:

- a member's counter *ahead* of this one's (no member can be a generation ahead of another that is still
  joining, so something outside the job wrote it): :class:`~pyg_dist.errors.TamperedStoreError` naming the key;
- a member that failed and published its line (:mod:`.verdict`): :class:`~pyg_dist.errors.PeerFailedError`
  quoting it.

An entry that is malformed, or (with a secret file) not signed with the job's secret, is a
:class:`~pyg_dist.errors.TamperedStoreError` before anything dials it.

Example:
    >>> store_address(DistContext(rank=0, world_size=2, num_partitions=2, rpc_port=29511))
    'the RPC rendezvous store at 127.0.0.1:29511'
"""
from __future__ import annotations

import time
from datetime import timedelta
from typing import Dict, List, Tuple

from ...context import DistContext
from ...envvars import raw
from ...errors import PeerFailedError, PyGDistError, RpcTimeoutError, TamperedStoreError
from .. import verdict
from .auth import Keyring

NS = "pyg_dist/sockets"
#: Seconds between looks for a hopeless wait (a member ahead, a published failure line).
LOOK_EVERY = 2.0


def store_address(ctx: DistContext) -> str:
    """The store this world meets in, as an error should name it."""
    if ctx.rpc_init_method == "env://":
        where = f"{raw('MASTER_ADDR', default=ctx.master_addr)}:{raw('MASTER_PORT', default=str(ctx.master_port))}"
        return f"torchrun's agent store at {where}"
    return f"the RPC rendezvous store at {ctx.master_addr}:{ctx.rpc_port}"


def generation(store, ctx: DistContext) -> Tuple[int, str]:
    """This member's next generation and its key space ``pyg_dist/sockets/<gen>``."""
    gen = int(store.add(f"{NS}/gen/{ctx.rpc_rank}", 1))
    return gen, f"{NS}/{gen}"


def publish(store, ring: Keyring, host: str, port: int) -> None:
    """Leaves this member's entry for the others."""
    store.set(f"{ring.ns}/addr/{ring.rank}", ring.entry(host, port))


def addresses(store, ctx: DistContext, ring: Keyring, gen: int, timeout: float) -> Dict[int, Tuple[str, int, bytes]]:
    """Every member's ``(host, port, public key)``, checked, within ``timeout`` seconds (see the module doc)."""
    try:
        return _addresses(store, ctx, ring, gen, timeout)
    except (PyGDistError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 -- the store itself failed under us
        raise PeerFailedError("RPC start-up", store_address(ctx), f"the store stopped answering ({exc}); outside "
                              "torchrun rpc rank 0 hosts it, so rpc rank 0 ended") from None


def _addresses(store, ctx: DistContext, ring: Keyring, gen: int, timeout: float) -> Dict[int, Tuple[str, int, bytes]]:
    keys = {r: f"{ring.ns}/addr/{r}" for r in range(ctx.rpc_world_size)}
    deadline = time.monotonic() + timeout
    found: Dict[int, Tuple[str, int, bytes]] = {}
    while True:
        missing = [r for r in keys if r not in found]
        try:
            store.wait([keys[r] for r in missing], timedelta(seconds=max(0.05, min(LOOK_EVERY,
                                                                                     deadline - time.monotonic()))))
            missing_now: List[int] = []
        except Exception as exc:  # noqa: BLE001 -- the store's wait timed out: see who is there
            if "timeout" not in str(exc).lower() and "timed out" not in str(exc).lower():
                raise
            missing_now = [r for r in missing if not store.check([keys[r]])]
        for r in missing:
            if r not in missing_now:
                found[r] = ring.parse_entry(r, bytes(store.get(keys[r])), keys[r])
        if not missing_now:
            return found
        _hopeless(store, ctx, gen, missing_now)
        if time.monotonic() >= deadline:
            raise RpcTimeoutError(f"sockets rendezvous of rpc rank {ctx.rpc_rank}: rpc ranks {missing_now} did not "
                                  f"publish their listener within {timeout:g} s in {store_address(ctx)}; did every "
                                  "rank start, with the same transport (PYG_DIST_TRANSPORT)?")


def _hopeless(store, ctx: DistContext, gen: int, missing: List[int]) -> None:
    """Raises when waiting on for ``missing`` cannot end well (see the module doc)."""
    for r in missing:
        key = f"{NS}/gen/{r}"
        theirs = int(store.add(key, 0)) if store.check([key]) else 0
        if theirs > gen:
            raise TamperedStoreError(key, f"rpc rank {r} is at generation {theirs} while rpc rank {ctx.rpc_rank} "
                                          f"joins generation {gen}: no member of this job moved it there (written "
                                          f"from outside the job, in {store_address(ctx)})")
        name = ctx.worker_name(r)
        said = verdict.said_by_rpc_rank(r, name) if verdict.anyone_said() else None
        if said:
            raise PeerFailedError("RPC start-up", f"rpc rank {r} ({name})", "it did not join", said=said)


__all__ = ["NS", "store_address", "generation", "publish", "addresses"]
