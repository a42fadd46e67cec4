"""A rank whose RPC transport aborts says so in one typed line before it dies.

TensorPipe (torch RPC's transport) trusts the first bytes of every connection to its listeners: a stray
connection (a port scanner, a load balancer's health check, ``GET / HTTP/1.0``) makes it allocate what the
junk claims, throw ``std::bad_alloc`` on its event-loop thread and end the process through
``std::terminate`` (SIGABRT). Nothing in torch's options prevents it (measured: ``scripts/bench_faults.py``,
rows ``junk-*``; gloo, torchrun's store and pyg_dist's stores survive the same bytes). What pyg_dist can
do is make the death legible: :func:`install` sets a C++ terminate handler that prints

    [rank 1] TransportAbortError: pyg_dist_trainer_1 (pid 123): torch RPC's transport (TensorPipe) aborted ...

(the handler runs Python, so it waits for the GIL; every blocking torch call releases it) and publishes that
line in the world's store (:mod:`.verdict`). Survivors quote it in their own typed line
(:class:`~pyg_dist.rpc.calls.RpcFuture`, :func:`pyg_dist.train.entry.peer_failure`); a peer that published
nothing is never said to have aborted. Firewalling the listeners is the cure (README, "Security").
"""
from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import os
import threading
from typing import Any, Optional

from ...envvars import raw
from .. import verdict

#: ``std::set_terminate(void (*)())`` in libstdc++ (loaded by torch).
_SET_TERMINATE = "_ZSt13set_terminatePFvvE"
_HANDLER_TYPE = ctypes.CFUNCTYPE(None)
_INSTALLED: dict = {}


def _line(name: str) -> bytes:
    rank = raw("RANK", default="?")
    return (f"[rank {rank}] TransportAbortError: {name} (pid {os.getpid()}): torch RPC's transport (TensorPipe) "
            "aborted on an uncaught C++ error, most likely an unexpected connection to one of its listeners "
            "(a port scanner or health check); firewall them (README: Security)\n").encode()


def install(name: str) -> bool:
    """Installs the terminate handler for this process (once; returns whether it could)."""
    if os.getpid() in _INSTALLED:
        return True
    setter: Any = None
    for lib in ("libstdc++.so.6", ctypes.util.find_library("stdc++")):  # torch loads it privately (RTLD_LOCAL):
        try:                                                             # open that same library by name
            setter = getattr(ctypes.CDLL(lib), _SET_TERMINATE) if lib else None
        except (AttributeError, OSError):  # no libstdc++ (another C++ runtime): the abort stays torch's
            continue
        if setter is not None:
            break
    if setter is None:
        return False
    line = _line(name)
    previous: Optional[int] = None

    entered: list = []
    said = threading.Event()

    def on_terminate() -> None:
        if not entered:  # once: a C++ error inside the store call below would terminate again
            entered.append(True)
            os.write(2, line)
            verdict.publish(line.decode())  # survivors quote it (and only then speak of a TensorPipe abort)
            said.set()
        else:  # another thread's error (two stray connections at once): let the first finish its line
            said.wait(verdict.STORE_TIMEOUT + 1.0)
        os.abort()  # the exit status stays SIGABRT (torchrun reports it)

    handler = _HANDLER_TYPE(on_terminate)
    setter.restype, setter.argtypes = ctypes.c_void_p, [_HANDLER_TYPE]
    previous = setter(handler)
    _INSTALLED[os.getpid()] = (handler, previous)  # the callback must outlive the process
    if previous:  # at exit, before the interpreter finalises (a callback then could not take the GIL)
        atexit.register(setter, _HANDLER_TYPE(previous))
    return True


__all__ = ["install"]
