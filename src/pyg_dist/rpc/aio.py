"""One background asyncio event loop per process, and the bridge from torch futures to asyncio.

The sampler runs its coroutines here (``run_coroutine(coro, timeout)`` from synchronous code) so it can
``await asyncio.gather(*remote_calls)`` while doing local work. The loop starts lazily, is private to
the process that started it (a forked child starts its own), and stops at :func:`stop_loop`
(``shutdown_rpc`` calls it). Every wait here is bounded.

Example:
    >>> import asyncio
    >>> async def two():
    ...     await asyncio.sleep(0)
    ...     return 2
    >>> run_coroutine(two(), timeout=5.0)
    2
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Coroutine, Optional

import torch

from ..errors import InvalidArgumentError, PyGDistError, RpcTimeoutError


@dataclass
class _LoopThread:
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    pid: int


_LOCK = threading.Lock()
_CURRENT: Optional[_LoopThread] = None


def _check_timeout(where: str, timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidArgumentError(where, "timeout", timeout, "a positive number of seconds")
    return float(timeout)


def get_loop() -> asyncio.AbstractEventLoop:
    """Returns this process's background event loop, starting it on first use."""
    global _CURRENT
    with _LOCK:
        cur = _CURRENT
        if cur is not None and cur.pid == os.getpid() and cur.thread.is_alive():
            return cur.loop
        loop = asyncio.new_event_loop()
        started = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(started.set)
            loop.run_forever()

        thread = threading.Thread(target=main, name="pyg_dist-aio", daemon=True)
        thread.start()
        if not started.wait(30.0):
            raise RpcTimeoutError("pyg_dist background event loop did not start within 30 s")
        _CURRENT = _LoopThread(loop, thread, os.getpid())
        return loop


def in_loop_thread() -> bool:
    """True when called from the background loop's own thread."""
    cur = _CURRENT
    return cur is not None and cur.thread is threading.current_thread()


def _close(coro: Awaitable) -> None:
    if asyncio.iscoroutine(coro):
        coro.close()  # never started: close it so it is not reported as "never awaited"


def run_coroutine(coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
    """Runs ``coro`` on the background loop and waits at most ``timeout`` seconds for its result.

    Raises:
        RpcTimeoutError: it did not finish in time (it is cancelled).
        PyGDistError: called from the loop thread itself (that would deadlock).
    """
    try:
        timeout = _check_timeout("run_coroutine", timeout)
    except InvalidArgumentError:
        _close(coro)
        raise
    if in_loop_thread():
        _close(coro)
        raise PyGDistError("run_coroutine() called from the pyg_dist event loop thread; "
                           "use 'await' there instead (blocking would deadlock)")
    fut = asyncio.run_coroutine_threadsafe(coro, get_loop())
    try:
        return fut.result(timeout)
    except concurrent.futures.TimeoutError:
        if fut.done() and not fut.cancelled():
            raise  # the coroutine's own timeout (an RpcTimeoutError naming op, partition and rank): keep it
        fut.cancel()
        raise RpcTimeoutError(f"coroutine did not finish within {timeout:g} s (cancelled)") from None


def submit_coroutine(coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
    """Starts ``coro`` on the background loop and returns at once; wait with ``future.result(timeout)``.

    Raises:
        PyGDistError: called from the loop thread itself (await the coroutine there instead).
    """
    if in_loop_thread():
        _close(coro)
        raise PyGDistError("submit_coroutine() called from the pyg_dist event loop thread; use 'await' there")
    return asyncio.run_coroutine_threadsafe(coro, get_loop())


def stop_loop(timeout: float = 10.0) -> None:
    """Cancels pending tasks and stops this process's background loop (no-op if none runs)."""
    global _CURRENT
    with _LOCK:
        cur, _CURRENT = _CURRENT, None
    if cur is None or cur.pid != os.getpid() or not cur.thread.is_alive():
        return

    async def cancel_all() -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        asyncio.run_coroutine_threadsafe(cancel_all(), cur.loop).result(timeout)
    except concurrent.futures.TimeoutError:
        pass  # tasks that ignore cancellation: the loop is stopped below regardless
    cur.loop.call_soon_threadsafe(cur.loop.stop)
    cur.thread.join(timeout)
    if cur.thread.is_alive():
        raise RpcTimeoutError(f"pyg_dist background event loop did not stop within {timeout:g} s")
    cur.loop.close()


def wrap_torch_future(fut: torch.futures.Future) -> asyncio.Future:
    """An asyncio future (of the running loop) that completes with ``fut``.

    The asyncio future's result is the torch future itself once it is done; call ``fut.wait()`` on it
    to read the value or raise its error without blocking. Must be called inside a running loop.
    """
    loop = asyncio.get_running_loop()
    out = loop.create_future()

    def resolve() -> None:
        if not out.done():
            out.set_result(fut)

    def on_done(_: torch.futures.Future) -> None:
        try:
            loop.call_soon_threadsafe(resolve)
        except RuntimeError:
            pass  # the loop closed meanwhile; nobody is waiting any more

    fut.add_done_callback(on_done)
    return out
