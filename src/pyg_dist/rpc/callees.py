"""The named callee table: what a process can be asked to run on behalf of a peer.

A callee is a synchronous function ``fn(payload) -> reply`` registered under a name in *every* process
of the world (register before ``init_rpc``; peers look it up by name, never by registration order).
Payloads and replies are dataclasses of tensors (typed messages). A failure inside a callee does not
cross the wire as a pickled exception: the callee's process turns it into a :class:`CallReply` carrying
the formatted traceback, and the caller raises :class:`~pyg_dist.errors.RemoteCallError` from it.

Example:
    >>> from dataclasses import dataclass
    >>> import torch
    >>> @dataclass
    ... class Ids:
    ...     ids: torch.Tensor
    >>> @register_callee("doc_double")
    ... def double(msg: Ids) -> Ids:
    ...     return Ids(msg.ids * 2)
    >>> serve("doc_double", Ids(torch.tensor([1, 2]))).value
    Ids(ids=tensor([2, 4]))
    >>> unregister_callee("doc_double")
"""
from __future__ import annotations

import inspect
import re
import threading
import traceback
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

from ..errors import InvalidArgumentError
from . import wire
from .state import live_state

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]*$")
_LOCK = threading.Lock()
#: name -> callee; the one mutable module-level registry of the package.
_CALLEES: Dict[str, Callable[[Any], Any]] = {}
#: callee id (frames of the ``sockets`` transport name a callee by it) -> name.
_IDS: Dict[int, str] = {}
#: The partitioning (folder id) this process serves; every request carries its caller's (see :func:`serve`).
_PARTITIONING: Dict[str, Optional[str]] = {"id": None}


def set_partitioning(folder_id: Optional[str]) -> None:
    """Declares the partitioning this process serves (``serve_partition`` does it): requests from a
    process that declared another one are refused. ``None``: accept every request."""
    if folder_id is not None and (not isinstance(folder_id, str) or not folder_id):
        raise InvalidArgumentError("set_partitioning", "folder_id", folder_id, "a non-empty str or None")
    _PARTITIONING["id"] = folder_id


def partitioning() -> Optional[str]:
    """The partitioning declared by :func:`set_partitioning` (``None``: none)."""
    return _PARTITIONING["id"]


@dataclass
class CallReply:
    """What a callee's process sends back: the value, or the failure as text.

    Attributes:
        value: The callee's return value (when ``error`` is None).
        error: Formatted traceback of the callee's exception, or None on success.
        served_by: Description of the serving process (its RPC name), for error messages.
    """

    value: Any = None
    error: Optional[str] = None
    served_by: str = ""


def register_callee(name: str, fn: Optional[Callable[[Any], Any]] = None, *, replace: bool = False):
    """Registers ``fn`` as the callee ``name``; usable as ``@register_callee("name")``.

    Registering the same function twice is a no-op; a different function under a taken name raises
    unless ``replace=True``.

    Args:
        name: Identifier (letters, digits, ``_ . : -``), the same in every process.
        fn: A synchronous callable taking one payload argument.
        replace: Allow replacing another function registered under ``name``.

    Example:
        >>> register_callee("doc_echo", lambda msg: msg)   # doctest: +ELLIPSIS
        <function <lambda> at ...>
        >>> unregister_callee("doc_echo")
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidArgumentError("register_callee", "name", name,
                                   "an identifier of letters, digits and '_.:-'")
    if fn is None:
        return lambda f: register_callee(name, f, replace=replace)
    if not callable(fn):
        raise InvalidArgumentError("register_callee", "fn", fn, "a callable taking one payload")
    if inspect.iscoroutinefunction(fn):
        raise InvalidArgumentError("register_callee", "fn", fn,
                                   "a synchronous function (callees run on RPC threads; not 'async def')")
    with _LOCK:
        old = _CALLEES.get(name)
        if old is not None and old is not fn and not replace:
            raise InvalidArgumentError("register_callee", "name", name,
                                       f"a free name ({old!r} is registered under it; pass replace=True)")
        other = _IDS.get(callee_id(name), name)
        if other != name:
            raise InvalidArgumentError("register_callee", "name", name, f"a name whose callee id differs from "
                                       f"that of the registered {other!r} (rename one)")
        _CALLEES[name] = fn
        _IDS[callee_id(name)] = name
    return fn


def unregister_callee(name: str) -> None:
    """Removes the callee ``name`` (no-op if absent)."""
    with _LOCK:
        if _CALLEES.pop(name, None) is not None:
            _IDS.pop(callee_id(name), None)


def callee_id(name: str) -> int:
    """The 32-bit id naming callee ``name`` in frames: CRC-32 of the name (registration refuses a collision)."""
    return zlib.crc32(name.encode())


def name_of(cid: int) -> Optional[str]:
    """The registered callee whose id is ``cid``, or ``None``."""
    with _LOCK:
        return _IDS.get(cid)


def registered_callees() -> Tuple[str, ...]:
    """Sorted names of the registered callees."""
    with _LOCK:
        return tuple(sorted(_CALLEES))


def lookup(name: str) -> Callable[[Any], Any]:
    """The callee registered as ``name``, or :class:`InvalidArgumentError` listing the known names."""
    with _LOCK:
        fn = _CALLEES.get(name)
    if fn is None:
        raise InvalidArgumentError("call", "op", name, f"a registered callee, one of {list(registered_callees())}")
    return fn


def serve(name: str, payload: Any, served_by: str = "", caller_partitioning: Optional[str] = None) -> CallReply:
    """Runs callee ``name`` on ``payload`` here; never raises (failures become ``CallReply.error``).

    This is the function the RPC layer ships to the serving process (pickled by reference). A request whose
    ``caller_partitioning`` differs from the one this process serves is refused: the two processes opened
    different partitionings, and ids would address other rows.
    """
    mine = _PARTITIONING["id"]
    if mine is not None and caller_partitioning is not None and caller_partitioning != mine:
        return CallReply(error=f"PartitionMismatch: refused '{name}': the caller opened partitioning "
                               f"{caller_partitioning}, {served_by or 'this process'} serves {mine} (folders "
                               "from different partitioner runs; copy the same folder to every machine)",
                         served_by=served_by)
    try:
        fn = lookup(name)
        return CallReply(value=fn(payload), served_by=served_by)
    except Exception:  # noqa: BLE001 -- every failure travels back to the caller
        return CallReply(error=traceback.format_exc(), served_by=served_by)


def serve_packed(op: str, payload: Any, partitioning: Optional[str] = None, served_by: str = "") -> CallReply:
    """:func:`serve` for a caller in another process: ``payload`` and the reply's value as :mod:`.wire` packs them
    (int32 where ids fit). Every transport's serving side runs this; a malformed payload travels back as an error."""
    if not served_by:
        state = live_state()
        served_by = state.name if state else ""
    try:
        payload, _ = wire.unpack(payload, "the caller")
    except Exception as exc:  # noqa: BLE001 -- a malformed payload travels back like a callee's failure
        return CallReply(error=f"{type(exc).__name__}: {exc}", served_by=served_by)
    reply = serve(op, payload, served_by=served_by, caller_partitioning=partitioning)
    if reply.error is None:
        reply.value = wire.pack(reply.value)
    return reply
