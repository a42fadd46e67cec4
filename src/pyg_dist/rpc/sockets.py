"""The ``sockets`` transport: pyg_dist's own TCP carrier of calls (the default; see :mod:`.transport`).

- **One listener per process** (trainers and sampler workers), bound on this machine's address on the interface
  that reaches ``MASTER_ADDR`` (:func:`pyg_dist.iface.own_address`; ``$PYG_DIST_IFNAME`` wins), on a port the OS picks,
  published through the world's rendezvous store (the ``rpc_port`` store, or torchrun's agent store).
- **Authentication first** (:mod:`.auth`): a connection that does not complete the mutual HMAC handshake on the
  job's secret within 10 s (a port scanner, ``GET / HTTP/1.0``, random bytes, another job) is closed after at
  most a few dozen bytes were read, with one rate-limited log line; the process and its other connections carry on.
- **Frames, not pickles** (:mod:`.frames`): requests are ``(partitioning, message)``, replies
  :class:`~pyg_dist.rpc.CallReply`; a malformed frame from an authenticated peer closes that connection and
  fails that peer's calls with a typed error naming the peer and the field.
- **Many calls in flight** per connection, matched by call id; each caller's connection to a peer is opened on
  first use (TCP_NODELAY), replies are read by one thread per connection straight into the reply's tensors
  (``recv_into`` with ``MSG_WAITALL``, the GIL released). Their memory is recycled: feature replies travel in
  chunks of at most 8 MiB, and with :func:`pyg_dist._alloc.tune_allocator` (every distributed session and sampler
  worker) glibc keeps freed blocks under 32 MiB for the next reply instead of faulting them in again. Ids keep
  crossing as int32 where they fit (:mod:`.wire`).
- **Failures**: a peer that dies closes its connections, which fails every call pending on them at once; a call
  without a reply within its timeout fails with "timed out" (a sweeper checks every 0.1 s).
"""
from __future__ import annotations

import concurrent.futures
import itertools
import os
import socket
import threading
import time
import weakref
from datetime import timedelta
from typing import Any, Dict, List, Optional, Set, Tuple

import torch

from ..context import DistContext
from ..errors import PyGDistError, RpcTimeoutError
from . import auth, callees, frames, leave
from .conn import PeerLost, RateLimitedLog, close_quietly, read_frame, send_frame
from .transport import Transport, check_port_free, run_bounded

_NS = "pyg_dist/sockets"
#: Transports running in this process: a forked child (a DataLoader worker) drops their sockets at once, so a
#: listener or connection never outlives its owner in a child that does not serve it.
_LIVE: "weakref.WeakSet[SocketTransport]" = weakref.WeakSet()


def _drop_in_child() -> None:
    for transport in list(_LIVE):
        transport.forget_sockets()
    _LIVE.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_in_child)
#: Connections allowed to be in their handshake at once (more are closed at once).
MAX_HANDSHAKING = 64


class _Conn:
    """One connected, authenticated socket and the calls waiting for a reply on it."""

    def __init__(self, sock: socket.socket, peer: str):
        self.sock, self.peer = sock, peer
        self.send_lock = threading.Lock()
        self.pending: Dict[int, Tuple[torch.futures.Future, float]] = {}
        self.lock = threading.Lock()
        self.broken = False

    def pop(self, call_id: int) -> Optional[torch.futures.Future]:
        with self.lock:
            entry = self.pending.pop(call_id, None)
        return None if entry is None else entry[0]

    def fail_all(self, exc: Exception) -> None:
        with self.lock:
            self.broken = True
            pending, self.pending = self.pending, {}
        for fut, _ in pending.values():
            fut.set_exception(exc)
        close_quietly(self.sock)

    def overdue(self, now: float) -> List[Tuple[torch.futures.Future, float]]:
        with self.lock:
            late = [cid for cid, (_, deadline) in self.pending.items() if deadline < now]
            return [self.pending.pop(cid) for cid in late]


class SocketTransport(Transport):
    """See the module docstring."""

    name = "sockets"

    ctx: DistContext
    listener: socket.socket

    def __init__(self) -> None:
        self.log = RateLimitedLog()
        self.closing = threading.Event()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._clients: Dict[int, _Conn] = {}
        self._dialing: Dict[int, threading.Lock] = {}
        self._served: Set[socket.socket] = set()  # open server-side connections (closed ones leave it)
        self._handshaking = 0
        self._barriers = 0

    # ------------------------------------------------------------------------------------- joining
    def start(self, ctx: DistContext, name: str, timeout: float, call_timeout: float, num_threads: int) -> None:
        """See :meth:`pyg_dist.rpc.transport.Transport.start`."""
        from pyg_dist.iface import listening_socket, own_address

        self.ctx, self.name_, self.timeout = ctx, name, timeout
        if ctx.hosts_rpc_store and not leave.is_hosting(ctx):
            check_port_free(leave.rpc_port(ctx))
        self.pool = concurrent.futures.ThreadPoolExecutor(num_threads, thread_name_prefix="pyg_dist-serve")
        self.listener = listening_socket(own_address(ctx.master_addr), 0)
        _LIVE.add(self)
        host, port = self.listener.getsockname()[:2]
        what = f"init_rpc of {name} (rpc rank {ctx.rpc_rank} of {ctx.rpc_world_size}, sockets transport)"
        try:
            self.store = run_bounded(lambda: leave.rendezvous_store(ctx, timeout), timeout, what)
            gen = self.store.add(f"{_NS}/gen/{ctx.rpc_rank}", 1)
            self.ns = f"{_NS}/{gen}"
            self.secret = run_bounded(lambda: auth.job_secret(self.store, ctx.rpc_rank == 0, f"{self.ns}/secret"),
                                      timeout, what)
            self._spawn(self._accept_loop, "accept")
            self._spawn(self._sweep_loop, "sweep")
            self.store.set(f"{self.ns}/addr/{ctx.rpc_rank}", f"{host} {port}")
            self.addrs = run_bounded(lambda: self._addresses(timeout), timeout, what)
        except RpcTimeoutError as exc:
            self._close()
            raise RpcTimeoutError(f"{exc}; did every rank start, with the same transport (PYG_DIST_TRANSPORT), "
                                  f"and is {ctx.master_addr}:{ctx.rpc_port} reachable?") from None
        except Exception:
            self._close()
            raise

    def _addresses(self, timeout: float) -> Dict[int, Tuple[str, int]]:
        keys = [f"{self.ns}/addr/{r}" for r in range(self.ctx.rpc_world_size)]
        self.store.wait(keys, timedelta(seconds=timeout))
        out = {}
        for r, key in enumerate(keys):
            host, port = self.store.get(key).decode().split()
            out[r] = (host, int(port))
        return out

    def _spawn(self, fn, what: str, *args) -> threading.Thread:
        thread = threading.Thread(target=fn, args=args, name=f"pyg_dist-sockets-{what}", daemon=True)
        thread.start()
        return thread

    # ------------------------------------------------------------------------------------- calling
    def call(self, rank: int, op: str, payload: Any, partitioning: Optional[str],
             timeout: float) -> torch.futures.Future:
        """See :meth:`pyg_dist.rpc.transport.Transport.call`."""
        return self._send(rank, frames.REQUEST, callees.callee_id(op), (partitioning, payload), timeout)

    def ping(self, rank: int, timeout: float) -> torch.futures.Future:
        """See :meth:`pyg_dist.rpc.transport.Transport.ping`."""
        return self._send(rank, frames.PING, 0, None, timeout)

    def _send(self, rank: int, kind: int, cid: int, body: Any, timeout: float) -> torch.futures.Future:
        call_id = next(self._ids)
        head, blobs = frames.encode(kind, call_id, cid, body)  # a message frames cannot carry raises here
        fut: torch.futures.Future = torch.futures.Future()
        try:
            conn = self._client(rank)
        except (OSError, PyGDistError) as exc:
            fut.set_exception(exc if isinstance(exc, PyGDistError) else
                              PeerLost(f"cannot connect to {self.ctx.worker_name(rank)} at {self.addrs[rank]}: {exc}"))
            return fut
        with conn.lock:
            if conn.broken:
                fut.set_exception(PeerLost(f"the connection to {conn.peer} broke"))
                return fut
            conn.pending[call_id] = (fut, time.monotonic() + timeout)
        try:
            send_frame(conn.sock, conn.send_lock, head, blobs)
        except OSError as exc:
            conn.fail_all(PeerLost(f"sending to {conn.peer} failed: {exc}"))
        return fut

    def _client(self, rank: int) -> _Conn:
        with self._lock:
            conn = self._clients.get(rank)
            dialing = self._dialing.setdefault(rank, threading.Lock())
        if conn is not None and not conn.broken:
            return conn
        with dialing:  # one connection per peer; never under self._lock (the peer may be dialing us)
            with self._lock:
                conn = self._clients.get(rank)
            if conn is not None and not conn.broken:
                return conn
            if self.closing.is_set():
                raise PeerLost(f"{self.name_} is shutting down its transport")
            peer = f"{self.ctx.worker_name(rank)} at {self.addrs[rank][0]}:{self.addrs[rank][1]}"
            sock = socket.create_connection(self.addrs[rank], timeout=auth.HANDSHAKE_TIMEOUT)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                auth.connect(sock, self.secret, peer)
            except BaseException:
                close_quietly(sock)
                raise
            conn = _Conn(sock, peer)
            with self._lock:
                self._clients[rank] = conn
        self._spawn(self._reply_loop, f"replies-{rank}", conn)
        return conn

    def _reply_loop(self, conn: _Conn) -> None:
        try:
            while True:
                hdr, body, err = read_frame(conn.sock, conn.peer)
                if hdr.kind not in (frames.REPLY, frames.PONG):
                    raise frames.FrameError(conn.peer, "kind", f"{hdr.kind} is no reply")
                fut = conn.pop(hdr.call_id)
                if fut is not None:  # else: it timed out meanwhile
                    fut.set_exception(err) if err is not None else fut.set_result(body)
        except frames.FrameError as exc:
            self.log.note("malformed", f"{self.name_}: {exc}; closed that connection")
            conn.fail_all(exc)
        except Exception as exc:  # noqa: BLE001 -- every pending call learns it
            conn.fail_all(PeerLost(f"connection to {conn.peer} lost: {exc}" if not self.closing.is_set()
                                   else f"{self.name_} shut its transport down"))

    def _sweep_loop(self) -> None:
        while not self.closing.wait(0.1):
            now = time.monotonic()
            with self._lock:
                conns = list(self._clients.values())
            for conn in conns:
                for fut, _ in conn.overdue(now):
                    fut.set_exception(TimeoutError(f"call to {conn.peer} timed out (no reply by its deadline)"))

    # ------------------------------------------------------------------------------------- serving
    def _accept_loop(self) -> None:
        while not self.closing.is_set():
            try:
                sock, addr = self.listener.accept()
            except OSError:
                return  # the listener was closed
            with self._lock:
                full = self._handshaking >= MAX_HANDSHAKING or self.closing.is_set()
                self._handshaking += 0 if full else 1
            if full:
                self.log.note("refused", f"{self.name_}: refused a connection from {addr[0]}:{addr[1]} "
                              f"({MAX_HANDSHAKING} handshakes already open)")
                close_quietly(sock)
                continue
            self._spawn(self._serve_conn, "serve", sock, f"{addr[0]}:{addr[1]}")

    def _serve_conn(self, sock: socket.socket, peer: str) -> None:
        try:
            auth.accept(sock, self.secret, peer)
        except (OSError, PyGDistError) as exc:
            self.log.note("refused", f"{self.name_}: refused a connection: {exc}")
            close_quietly(sock)
            return
        finally:
            with self._lock:
                self._handshaking -= 1
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._served.add(sock)
        conn = _Conn(sock, f"the process at {peer}")
        try:
            self._request_loop(conn)
        except PeerLost:
            pass  # the caller closed its side (it shut down, or died: its own peers learn that)
        except Exception as exc:  # noqa: BLE001 -- one connection's trouble, never the process's
            if not self.closing.is_set():
                self.log.note("malformed", f"{self.name_}: {exc}; closed that connection")
        finally:
            with self._lock:
                self._served.discard(sock)
            close_quietly(sock)

    def _request_loop(self, conn: _Conn) -> None:
        while True:
            hdr, body, err = read_frame(conn.sock, conn.peer)
            if hdr.kind == frames.PING:
                head, blobs = frames.encode(frames.PONG, hdr.call_id, 0, leave.has_arrived())
                send_frame(conn.sock, conn.send_lock, head, blobs)
            elif hdr.kind != frames.REQUEST:
                raise frames.FrameError(conn.peer, "kind", f"{hdr.kind} is no request")
            else:
                self.pool.submit(self._answer, conn, hdr, body, err)

    def _answer(self, conn: _Conn, hdr: frames.Header, body: Any, err: Optional[Exception]) -> None:
        reply = _serve(hdr.callee, body, err, conn.peer)
        try:
            head, blobs = frames.encode(frames.REPLY, hdr.call_id, hdr.callee, reply)
        except Exception as exc:  # noqa: BLE001 -- the caller learns why
            head, blobs = frames.encode(frames.REPLY, hdr.call_id, hdr.callee, callees.CallReply(
                error=f"the reply of callee id {hdr.callee} cannot travel as a frame: {exc}",
                served_by=reply.served_by))
        try:
            send_frame(conn.sock, conn.send_lock, head, blobs)
        except OSError:
            pass  # the caller is gone; its own peers learn that
        del blobs  # the views of the bytes before the reply: dropping its tensors gives their byte budget back,
        del reply  # and the next request may then reuse their storages (the serving store's buffer pool)

    # ------------------------------------------------------------------------------------- leaving
    def barrier(self, timeout: float) -> None:
        """See :meth:`pyg_dist.rpc.transport.Transport.barrier`."""
        self._barriers += 1
        if not self._count_to_all(f"{self.ns}/barrier/{self._barriers}", timeout):
            raise RpcTimeoutError(f"global_barrier of {self.name_}: not every member arrived within {timeout:g} s")

    def _count_to_all(self, key: str, timeout: float) -> bool:
        self.store.add(key, 1)
        deadline = time.monotonic() + timeout
        while self.store.add(key, 0) < self.ctx.rpc_world_size:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def shutdown(self, graceful: bool, timeout: float) -> Optional[str]:
        """See :meth:`pyg_dist.rpc.transport.Transport.shutdown`."""
        ctx = self.ctx
        problem = leave.arrival_barrier(self, ctx, timeout) if graceful else None
        together = graceful and problem is None
        bound = min(timeout, 30.0)
        if together and not self._count_to_all(f"{self.ns}/leave", bound):
            problem = f"not every member finished the arrival barrier within {bound:g} s"
        self._close()
        if together:
            problem = leave.report_left_or_linger(ctx, bound) or problem
        return problem

    def forget_sockets(self) -> None:
        """In a forked child: closes this process's copies of the parent's sockets (the parent's stay open)."""
        socks = [getattr(self, "listener", None)] + [c.sock for c in self._clients.values()] + list(self._served)
        for sock in socks:
            try:
                if sock is not None:
                    sock.close()
            except OSError:
                pass

    def _close(self) -> None:
        _LIVE.discard(self)
        self.closing.set()
        close_quietly(getattr(self, "listener", None))
        with self._lock:
            clients, served = list(self._clients.values()), list(self._served)
            self._clients.clear()
        for conn in clients:
            conn.fail_all(PeerLost(f"{self.name_} shut its transport down"))
        for sock in served:
            close_quietly(sock)
        if hasattr(self, "pool"):
            self.pool.shutdown(wait=False, cancel_futures=True)


def _serve(cid: int, body: Any, err: Optional[Exception], peer: str) -> callees.CallReply:
    """The reply to one request: the callee's, or the reason it could not run."""
    op = callees.name_of(cid)
    if err is not None:
        return callees.CallReply(error=f"the request could not be read: {err}")
    if op is None:
        return callees.CallReply(error=f"no callee with id {cid} is registered here (registered: "
                                       f"{list(callees.registered_callees())})")
    ok = isinstance(body, tuple) and len(body) == 2 and (body[0] is None or isinstance(body[0], str))
    if not ok:
        return callees.CallReply(error=f"malformed request from {peer}: not (partitioning, message)")
    return callees.serve_packed(op, body[1], body[0])


__all__ = ["SocketTransport", "MAX_HANDSHAKING"]
