"""The ``sockets`` transport: pyg_dist's own TCP carrier of calls (the default; see :mod:`pyg_dist.rpc.transport`).

- **One listener per process** (trainers and sampler workers), bound on this machine's address on the interface
  that reaches ``MASTER_ADDR`` (:func:`pyg_dist.iface.own_address`; ``$PYG_DIST_IFNAME`` wins), on a port the OS picks,
  published through the world's rendezvous store (the ``rpc_port`` store, or torchrun's agent store).
- **Authentication first** (:mod:`.auth`): every member publishes an X25519 public key with its address (signed
  with the job's secret file when there is one; :mod:`.meet` checks every entry); a connection must prove within
  10 s, the whole handshake, that it holds the private key of the member it claims (a port scanner,
  ``GET / HTTP/1.0``, random bytes, another job, a store reader: closed after at most a few dozen bytes, one
  rate-limited log line). At most 64 connections are in their handshake at once; a new one closes the oldest of
  them (a flood of idle connections cannot keep a member out), and a dialer whose handshake was cut tries again
  until its call's timeout.
- **Every frame protected** (:mod:`.seal`): its integrity (default), or its encryption too, under per-connection,
  per-direction keys; a frame that fails its tag closes the connection and fails its calls with an
  :class:`~pyg_dist.rpc.seal.IntegrityError` naming the peer; nothing of it reaches a caller.
- **Bounds on members too**: a frame must arrive whole within :func:`~pyg_dist.rpc.conn.frame_deadline` of its
  header; a member keeps at most :data:`MAX_PER_PEER` connections here (a new one closes its oldest).
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

import collections
import concurrent.futures
import itertools
import os
import socket
import threading
import time
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch

from ...context import DistContext
from ...errors import PyGDistError, RpcTimeoutError
from ...timeouts import run_bounded
from .. import callees, join, leave
from ..settings import file_secret, wire_mode
from ..transport import Transport
from . import auth, frames, meet
from .conn import Conn, PeerLost, RateLimitedLog, close_quietly

#: Transports running in this process: a forked child (a DataLoader worker) drops their sockets at once, so a
#: listener or connection never outlives its owner in a child that does not serve it.
_LIVE: "weakref.WeakSet[SocketTransport]" = weakref.WeakSet()


def _drop_in_child() -> None:
    for transport in list(_LIVE):
        transport.forget_sockets()
    _LIVE.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_in_child)
#: Connections allowed to be in their handshake at once (a new one beyond closes the oldest).
MAX_HANDSHAKING = 64
#: Authenticated connections one member may hold to this process (a new one beyond closes its oldest).
MAX_PER_PEER = 4
class SocketTransport(Transport):
    """See the module docstring."""

    name = "sockets"

    ctx: DistContext
    listener: socket.socket

    def __init__(self, wire: Optional[str] = None) -> None:
        self.mode = wire_mode(wire)  # checked: a bad value names init_rpc's wire_protection (or the variable)
        self.log = RateLimitedLog()
        self.closing = threading.Event()
        self.met = threading.Event()  # every member's entry is in (servers check claimed ranks against them)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._clients: Dict[int, Conn] = {}
        self._dialing: Dict[int, threading.Lock] = {}
        self._served: Dict[int, List[Conn]] = collections.defaultdict(list)  # by the member's rpc rank
        self._shaking: Dict[socket.socket, Tuple[str, float]] = {}  # in their handshake, oldest first
        self._barriers = 0
        self.peers: Dict[int, Tuple[str, int, bytes]] = {}

    # ------------------------------------------------------------------------------------- joining
    def join(self, ctx: DistContext, name: str, timeout: float, call_timeout: float, num_threads: int) -> None:
        """See :meth:`pyg_dist.rpc.transport.Transport.join`."""
        from pyg_dist.iface import listening_socket, own_address

        self.ctx, self.name_, self.timeout = ctx, name, timeout
        secret = file_secret()
        self.pool = concurrent.futures.ThreadPoolExecutor(num_threads, thread_name_prefix="pyg_dist-serve")
        self.listener = listening_socket(own_address(ctx.master_addr), 0)
        _LIVE.add(self)
        host, port = self.listener.getsockname()[:2]
        what = f"init_rpc of {name} (rpc rank {ctx.rpc_rank} of {ctx.rpc_world_size}, sockets transport)"
        try:
            self.store = run_bounded(lambda: join.rendezvous_store(ctx, timeout), timeout, what)
            gen, ns = meet.generation(self.store, ctx)
            self.ns, self.ring = ns, auth.Keyring(ns, int(ctx.rpc_rank or 0), secret)
            self._spawn(self._accept_loop, "accept")
            self._spawn(self._sweep_loop, "sweep")
            meet.publish(self.store, self.ring, host, port)
            self.peers = meet.addresses(self.store, ctx, self.ring, gen, timeout)
            self.met.set()
        except RpcTimeoutError as exc:
            self._close()
            raise RpcTimeoutError(f"{exc} (is {meet.store_address(ctx)} reachable?)") from None
        except Exception:
            self._close()
            raise

    @property
    def addrs(self) -> Dict[int, Tuple[str, int]]:
        """Every member's listener, by rpc rank."""
        return {r: (host, port) for r, (host, port, _) in self.peers.items()}

    def _public_of(self, rank: int) -> bytes:
        if not self.met.wait(auth.HANDSHAKE_TIMEOUT) or rank not in self.peers:
            raise KeyError(rank)
        return self.peers[rank][2]

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
        deadline = time.monotonic() + timeout
        try:
            conn = self._client(rank, deadline)
        except (OSError, PyGDistError) as exc:
            fut.set_exception(exc if isinstance(exc, PyGDistError) else
                              PeerLost(f"cannot connect to {self.ctx.worker_name(rank)} at {self.addrs[rank]}: {exc}"))
            return fut
        with conn.lock:
            if conn.broken:
                fut.set_exception(PeerLost(f"the connection to {conn.peer} broke"))
                return fut
            conn.pending[call_id] = (fut, deadline)
        try:
            conn.send(head, blobs)
        except OSError as exc:
            conn.fail_all(PeerLost(f"sending to {conn.peer} failed: {exc}"))
        return fut

    def _client(self, rank: int, deadline: float) -> Conn:
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
            conn = self._dial(rank, deadline)
            with self._lock:
                self._clients[rank] = conn
        self._spawn(self._reply_loop, f"replies-{rank}", conn)
        return conn

    def _dial(self, rank: int, deadline: float) -> Conn:
        """An authenticated connection to ``rank``; a handshake cut short (the peer's slots full of strangers'
        connections, a reset) is tried again until ``deadline``."""
        host, port, public = self.peers[rank]
        peer = f"{self.ctx.worker_name(rank)} (rpc rank {rank}) at {host}:{port}"
        tries, delay = 0, 0.02
        while True:
            if self.closing.is_set():
                raise PeerLost(f"{self.name_} is shutting down its transport")
            tries += 1
            sock = None
            try:
                sock = socket.create_connection((host, port), timeout=auth.HANDSHAKE_TIMEOUT)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return Conn(sock, auth.connect(sock, self.ring, rank, public, self.mode, peer))
            except (auth.HandshakeCut, ConnectionResetError, socket.timeout) as exc:  # refused: nobody listens
                close_quietly(sock)
                if time.monotonic() + delay >= deadline:
                    raise auth.HandshakeCut(f"no handshake with {peer} in {tries} tries by the call's deadline: "
                                            f"{exc} (a listener whose {MAX_HANDSHAKING} handshake slots are taken "
                                            "by other connections closes the oldest: a flood of idle connections "
                                            "to that port?)") from None
                time.sleep(delay)
                delay = min(2 * delay, 1.0)
            except BaseException:
                close_quietly(sock)
                raise

    def _reply_loop(self, conn: Conn) -> None:
        try:
            while True:
                hdr, body, err = conn.read()
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
                clients = list(self._clients.values())
                conns = clients + [c for group in self._served.values() for c in group]
            for conn in clients:
                for fut, _ in conn.overdue(now):
                    fut.set_exception(TimeoutError(f"call to {conn.peer} timed out (no reply by its deadline)"))
            for conn in conns:
                due = conn.frame_due
                if due is not None and now > due:
                    conn.stalled = True
                    self.log.note("stalled", f"{self.name_}: a frame from {conn.peer} was not whole by its "
                                  "deadline; closed that connection")
                    close_quietly(conn.sock)

    # ------------------------------------------------------------------------------------- serving
    def _accept_loop(self) -> None:
        while not self.closing.is_set():
            try:
                sock, addr = self.listener.accept()
            except OSError:
                return  # the listener was closed
            oldest = None
            with self._lock:
                if self.closing.is_set():
                    close_quietly(sock)
                    continue
                if len(self._shaking) >= MAX_HANDSHAKING:
                    oldest = next(iter(self._shaking))
                    who, since = self._shaking.pop(oldest)
                self._shaking[sock] = (f"{addr[0]}:{addr[1]}", time.monotonic())
            if oldest is not None:
                self.log.note("full", f"{self.name_}: handshake slots full ({MAX_HANDSHAKING} open): closed the "
                              f"oldest, from {who}, open {time.monotonic() - since:.1f} s (a flood of idle "
                              "connections?)")
                close_quietly(oldest)
            self._spawn(self._serve_conn, "serve", sock, f"{addr[0]}:{addr[1]}")

    def _serve_conn(self, sock: socket.socket, addr: str) -> None:
        try:
            session = auth.accept(sock, self.ring, self._public_of, self.mode, addr)
        except (OSError, PyGDistError) as exc:
            self.log.note("refused", f"{self.name_}: refused a connection: {exc}")
            close_quietly(sock)
            return
        finally:
            with self._lock:
                self._shaking.pop(sock, None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Conn(sock, session)
        self._admit(conn)
        try:
            self._request_loop(conn)
        except PeerLost:
            pass  # the caller closed its side (it shut down, or died: its own peers learn that)
        except Exception as exc:  # noqa: BLE001 -- one connection's trouble, never the process's
            if not self.closing.is_set():
                self.log.note("malformed", f"{self.name_}: {exc}; closed that connection")
        finally:
            with self._lock:
                group = self._served.get(session.peer_rank, [])
                if conn in group:
                    group.remove(conn)
            close_quietly(sock)

    def _admit(self, conn: Conn) -> None:
        """Counts ``conn`` against its member's :data:`MAX_PER_PEER` (closing that member's oldest beyond it)."""
        with self._lock:
            group = self._served[conn.session.peer_rank]
            group.append(conn)
            old = group.pop(0) if len(group) > MAX_PER_PEER else None
        if old is not None:
            self.log.note("per-peer", f"{self.name_}: {conn.peer} opened more than {MAX_PER_PEER} connections; "
                          "closed its oldest")
            close_quietly(old.sock)

    def _request_loop(self, conn: Conn) -> None:
        while True:
            hdr, body, err = conn.read()
            if hdr.kind == frames.PING:
                head, blobs = frames.encode(frames.PONG, hdr.call_id, 0, leave.has_arrived())
                conn.send(head, blobs)
            elif hdr.kind != frames.REQUEST:
                raise frames.FrameError(conn.peer, "kind", f"{hdr.kind} is no request")
            else:
                self.pool.submit(self._answer, conn, hdr, body, err)

    def _answer(self, conn: Conn, hdr: frames.Header, body: Any, err: Optional[Exception]) -> None:
        reply = _serve(hdr.callee, body, err, conn.peer)
        try:
            head, blobs = frames.encode(frames.REPLY, hdr.call_id, hdr.callee, reply)
        except Exception as exc:  # noqa: BLE001 -- the caller learns why
            head, blobs = frames.encode(frames.REPLY, hdr.call_id, hdr.callee, callees.CallReply(
                error=f"the reply of callee id {hdr.callee} cannot travel as a frame: {exc}",
                served_by=reply.served_by))
        try:
            conn.send(head, blobs)
        except OSError:
            pass  # the caller is gone; its own peers learn that
        del blobs  # the views of the bytes before the reply: dropping its tensors gives their byte budget back,
        del reply  # and the next request may then reuse their storages (the serving store's buffer pool)

    def dial_for_test(self, rank: int) -> Tuple[socket.socket, auth.Session]:
        """An authenticated raw connection to ``rank`` and its session, as this member (tests and the fuzzer send
        hand-made frames through it; the transport never uses it)."""
        conn = self._dial(rank, time.monotonic() + auth.HANDSHAKE_TIMEOUT)
        return conn.sock, conn.session

    # ------------------------------------------------------------------------------------- leaving
    def barrier(self, timeout: float) -> None:
        """See :meth:`pyg_dist.rpc.transport.Transport.barrier`."""
        self._barriers += 1
        if not self._count_to_all(f"{self.ns}/barrier/{self._barriers}", timeout):
            raise RpcTimeoutError(f"global_barrier of {self.name_}: not every member arrived within {timeout:g} s")

    def _count_to_all(self, key: str, timeout: float) -> bool:
        self.store.add(key, 1)
        deadline, delay = time.monotonic() + timeout, 0.005
        while self.store.add(key, 0) < self.ctx.rpc_world_size:  # looks back off: a late member costs the store
            if time.monotonic() > deadline:                      # O(members) operations per 0.1 s, not per 10 ms
                return False
            time.sleep(delay)
            delay = min(2 * delay, 0.1)
        return True

    def arrival_counter(self) -> Tuple[Any, str, List[int]]:
        """For :func:`~pyg_dist.rpc.leave.arrival_barrier`: the store, the key arrivals are counted under, and the
        members this one called (asking them costs no new connection; one whose connection broke is asked again,
        so a dead member is named at once)."""
        with self._lock:
            connected = list(self._clients)
        return self.store, f"{self.ns}/arrived", sorted(connected)

    def leave(self, together: bool, bound: float) -> Optional[str]:
        """See :meth:`pyg_dist.rpc.transport.Transport.leave`: with every member, they count each other out of the
        arrival barrier first (nobody closes a connection a peer's barrier still pings)."""
        problem = None
        if together and not self._count_to_all(f"{self.ns}/leave", bound):
            problem = f"not every member finished the arrival barrier within {bound:g} s"
        self._close()
        return problem

    def _sockets(self) -> List[socket.socket]:
        """Every connection's socket (read without the lock: a forked child's copy of it may be held forever)."""
        conns = list(self._clients.values()) + [c for group in list(self._served.values()) for c in group]
        return [c.sock for c in conns] + list(self._shaking)

    def forget_sockets(self) -> None:
        """In a forked child: closes this process's copies of the parent's sockets (the parent's stay open)."""
        for sock in [getattr(self, "listener", None)] + self._sockets():
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
            others = self._sockets()
            clients = list(self._clients.values())
            self._clients.clear()
        for conn in clients:
            conn.fail_all(PeerLost(f"{self.name_} shut its transport down"))
        for sock in others:
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


__all__ = ["SocketTransport", "MAX_HANDSHAKING", "MAX_PER_PEER"]
