"""Frames of the ``sockets`` transport: a fixed struct header, a tensor table, a skeleton, raw tensor bytes.

No pickle, marshal or eval: a message (dataclasses, named tuples, tuples, lists and dicts of tensors, strings,
numbers, ``None``, dtypes) is written as a *skeleton* of typed tokens in which every tensor is a slot, followed
by the tensors' raw bytes. A dataclass or named tuple travels as ``module:qualname`` and the receiver resolves
it among the modules it has *already imported* (nothing is imported, no ``__init__`` runs: the fields are set
one by one), so a frame can only ever build plain values, tensors and message classes this process knows.

Layout (little-endian)::

    header  magic 'PGDF' | version u8 | kind u8 | flags u16 | call id u64 | callee id u32 |
            tensor count u32 | shape ints u32 | skeleton bytes u32 | tensor bytes u64
    table   per tensor: dtype code u8 | ndim u8 | 6 pad | byte count u64
    shapes  the tensors' dimensions, i64 each (``shape ints`` of them)
    skeleton
    tensor bytes, in table order

Every count and length is checked against the caps (:func:`caps`) and against each other (a tensor's bytes
equal its shape times its dtype's size, their sum equals the header's) **before** anything is allocated; a
violation is a :class:`FrameError` naming the peer and the field.

Example:
    >>> import torch
    >>> from pyg_dist.ops.hop import OneHop
    >>> head, blobs = encode(REQUEST, 7, 0x1234, ("part-1", OneHop(torch.arange(3), torch.arange(3),
    ...                      torch.ones(3, dtype=torch.int64))))
    >>> hdr = parse_header(head[:HEADER.size], "rank 1")
    >>> (hdr.kind, hdr.call_id, hdr.tensors)
    (1, 7, 3)
"""
from __future__ import annotations

import dataclasses
import struct
import sys
import types
from dataclasses import dataclass
from typing import Any, List, NamedTuple, Tuple

import torch
from torch import Tensor

from ...errors import InvalidArgumentError, PyGDistError
from ..settings import FRAME_MAX_ENV, frame_max_bytes

MAGIC = b"PGDF"
VERSION = 1
#: Frame kinds.
REQUEST, REPLY, PING, PONG = 1, 2, 3, 4
HEADER = struct.Struct("<4sBBHQIIIIQ")
ENTRY = struct.Struct("<BB6xQ")

#: dtype code <-> dtype (codes are part of the wire format: append only).
DTYPES: Tuple[torch.dtype, ...] = (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)
_CODE = {d: i for i, d in enumerate(DTYPES)}

#: Caps of one frame (``PYG_DIST_FRAME_MAX_MB`` bounds its tensor bytes: :func:`pyg_dist.rpc.settings.frame_max_bytes`).
MAX_TENSORS = 1 << 16
MAX_NDIM = 16
MAX_SKELETON = 8 << 20
MAX_DEPTH = 64


class FrameError(PyGDistError, ValueError):
    """A frame that breaks the format or a cap: names the peer, the field and the value."""

    def __init__(self, peer: str, field: str, problem: str):
        self.peer, self.field = peer, field
        super().__init__(f"malformed frame from {peer}: {field} {problem}")


class Header(NamedTuple):
    """The fixed header of a frame, its counts checked (:func:`parse_header`)."""
    kind: int
    flags: int
    call_id: int
    callee: int
    tensors: int
    shape_ints: int
    skeleton: int
    payload: int


# ----------------------------------------------------------------------------------------------- encoding
class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()
        self.tensors: List[Tensor] = []

    def put(self, obj: Any, depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            raise InvalidArgumentError("sockets transport", "message", type(obj).__name__,
                                       f"a message nested at most {MAX_DEPTH} deep")
        out = self.out
        if obj is None or obj is True or obj is False:
            out += {None: b"N", True: b"T", False: b"F"}[obj]
        elif isinstance(obj, Tensor):
            self._tensor(obj)
        elif isinstance(obj, int):
            if not -(1 << 63) <= obj < (1 << 63):
                raise InvalidArgumentError("sockets transport", "message", obj, "ints that fit in int64")
            out += b"i" + struct.pack("<q", obj)
        elif isinstance(obj, float):
            out += b"f" + struct.pack("<d", obj)
        elif isinstance(obj, str):
            self._bytes(b"s", obj.encode())
        elif isinstance(obj, bytes):
            self._bytes(b"b", obj)
        elif isinstance(obj, torch.dtype):
            if obj not in _CODE:
                raise InvalidArgumentError("sockets transport", "message", obj, f"a dtype of {DTYPES}")
            out += b"y" + bytes([_CODE[obj]])
        else:
            self._container(obj, depth)

    def _container(self, obj: Any, depth: int) -> None:
        kind = type(obj)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            values = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
            self._class(b"D", kind, len(values))
        elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
            values = list(obj)
            self._class(b"n", kind, len(values))
        elif kind in (list, tuple):
            values = list(obj)
            self.out += (b"l" if kind is list else b"u") + struct.pack("<I", len(values))
        elif kind is dict:
            values = [v for kv in obj.items() for v in kv]
            self.out += b"d" + struct.pack("<I", len(obj))
        else:
            raise InvalidArgumentError("sockets transport", "message", kind.__name__,
                                       "dataclasses, named tuples, tuples, lists and dicts of tensors, str, "
                                       "bytes, int, float, bool, None and dtypes")
        for value in values:
            self.put(value, depth + 1)

    def _class(self, tag: bytes, kind: type, n: int) -> None:
        name = f"{kind.__module__}:{kind.__qualname__}"
        if "<locals>" in name:
            raise InvalidArgumentError("sockets transport", "message", name, "a class defined at module level "
                                       "(the receiver finds message classes by module and name)")
        self._bytes(tag, name.encode())
        self.out += struct.pack("<I", n)

    def _bytes(self, tag: bytes, data: bytes) -> None:
        self.out += tag + struct.pack("<I", len(data)) + data

    def _tensor(self, t: Tensor) -> None:
        if t.dtype not in _CODE:
            raise InvalidArgumentError("sockets transport", "message", t.dtype, f"tensors of dtypes {DTYPES}")
        if t.dim() > MAX_NDIM:
            raise InvalidArgumentError("sockets transport", "message", tuple(t.shape), f"<= {MAX_NDIM} dims")
        self.out += b"t" + struct.pack("<I", len(self.tensors))
        self.tensors.append(t)


def _raw(t: Tensor) -> memoryview:
    """The bytes of ``t`` (to the CPU, contiguous) without a copy where possible."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous().reshape(-1)
    return memoryview(t.view(torch.uint8).numpy()) if t.numel() else memoryview(b"")  # type: ignore[arg-type]


def encode(kind: int, call_id: int, callee: int, body: Any, flags: int = 0) -> Tuple[bytes, List[memoryview]]:
    """A frame: its head (header, tensor table, shapes, skeleton: one ``bytes``) and its tensors' raw bytes.

    Raises:
        InvalidArgumentError: ``body`` holds something frames cannot carry (names the type).
    """
    writer = _Writer()
    writer.put(body)
    table, shapes, blobs = bytearray(), [], []  # type: ignore[var-annotated]
    for t in writer.tensors:
        blob = _raw(t)
        table += ENTRY.pack(_CODE[t.dtype], t.dim(), blob.nbytes)
        shapes.extend(t.shape)
        blobs.append(blob)
    payload = sum(b.nbytes for b in blobs)
    header = HEADER.pack(MAGIC, VERSION, kind, flags, call_id, callee, len(blobs), len(shapes),
                         len(writer.out), payload)
    return b"".join((header, bytes(table), struct.pack(f"<{len(shapes)}q", *shapes), bytes(writer.out))), blobs


# ----------------------------------------------------------------------------------------------- decoding
def parse_header(data: bytes, peer: str) -> Header:
    """The header of a frame from ``peer``, every count checked against the caps."""
    magic, version, kind, flags, call_id, callee, tensors, ints, skeleton, payload = HEADER.unpack(data)
    if magic != MAGIC:
        raise FrameError(peer, "magic", f"{magic!r} is not {MAGIC!r}")
    if version != VERSION:
        raise FrameError(peer, "version", f"{version} is not {VERSION} (do all processes run the same pyg_dist?)")
    if kind not in (REQUEST, REPLY, PING, PONG):
        raise FrameError(peer, "kind", f"{kind} is none of 1-4")
    _cap(peer, "tensor count", tensors, MAX_TENSORS)
    _cap(peer, "shape ints", ints, tensors * MAX_NDIM)
    _cap(peer, "skeleton bytes", skeleton, MAX_SKELETON)
    _cap(peer, "tensor bytes", payload, frame_max_bytes(), f" (${FRAME_MAX_ENV})")
    return Header(kind, flags, call_id, callee, tensors, ints, skeleton, payload)


def _cap(peer: str, field: str, value: int, cap: int, hint: str = "") -> None:
    if value > cap:
        raise FrameError(peer, field, f"{value} is over the cap {cap}{hint}")


@dataclass
class TensorSpec:
    """One tensor a frame announces: its dtype, shape and byte count (checked to agree)."""
    dtype: torch.dtype
    shape: Tuple[int, ...]
    nbytes: int


def parse_table(hdr: Header, table: bytes, shapes: bytes, peer: str) -> List[TensorSpec]:
    """The tensors a frame announces; their sizes agree with their shapes and add up to the header's."""
    dims = struct.unpack(f"<{hdr.shape_ints}q", shapes)
    specs, at, total = [], 0, 0
    for i in range(hdr.tensors):
        code, ndim, nbytes = ENTRY.unpack_from(table, i * ENTRY.size)
        if code >= len(DTYPES):
            raise FrameError(peer, f"tensor {i} dtype code", f"{code} is unknown")
        if ndim > MAX_NDIM or at + ndim > len(dims):
            raise FrameError(peer, f"tensor {i} ndim", f"{ndim} does not fit the shape table")
        shape = dims[at:at + ndim]
        at += ndim
        dtype = DTYPES[code]
        numel = 1
        for d in shape:
            if d < 0:
                raise FrameError(peer, f"tensor {i} shape", f"{shape} has a negative dimension")
            numel *= d
        if numel * dtype.itemsize != nbytes:
            raise FrameError(peer, f"tensor {i} byte count", f"{nbytes} is not {shape} x {dtype}")
        total += nbytes
        specs.append(TensorSpec(dtype, tuple(shape), nbytes))
    if at != len(dims) or total != hdr.payload:
        raise FrameError(peer, "tensor bytes", f"{hdr.payload} do not match the table ({total})")
    return specs


def empty_tensor(spec: TensorSpec) -> Tensor:
    """A fresh tensor for ``spec`` (allocated only after the caps were checked)."""
    return torch.empty(spec.shape, dtype=spec.dtype)


def tensor_buffer(t: Tensor) -> memoryview:
    """Writable bytes of a fresh contiguous tensor (the destination of ``recv_into``)."""
    if not t.numel():
        return memoryview(bytearray())
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())  # type: ignore[arg-type]


class _Reader:
    def __init__(self, data: bytes, tensors: List[Tensor], peer: str):
        self.data, self.at, self.tensors, self.peer = memoryview(data), 0, tensors, peer

    def take(self, n: int, field: str) -> memoryview:
        if self.at + n > len(self.data):
            raise FrameError(self.peer, field, f"runs past the skeleton's end ({len(self.data)} bytes)")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def u32(self, field: str) -> int:
        return struct.unpack("<I", self.take(4, field))[0]

    def get(self, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise FrameError(self.peer, "skeleton", f"is nested over {MAX_DEPTH} deep")
        tag = bytes(self.take(1, "skeleton tag"))
        simple = {b"N": None, b"T": True, b"F": False}
        if tag in simple:
            return simple[tag]
        if tag == b"i":
            return struct.unpack("<q", self.take(8, "int"))[0]
        if tag == b"f":
            return struct.unpack("<d", self.take(8, "float"))[0]
        if tag in (b"s", b"b"):
            raw = bytes(self.take(self.u32("string length"), "string"))
            return raw if tag == b"b" else self._text(raw)
        if tag == b"y":
            code = self.take(1, "dtype")[0]
            if code >= len(DTYPES):
                raise FrameError(self.peer, "dtype", f"code {code} is unknown")
            return DTYPES[code]
        if tag == b"t":
            index = self.u32("tensor slot")
            if index >= len(self.tensors):
                raise FrameError(self.peer, "tensor slot", f"{index} is not one of {len(self.tensors)} tensors")
            return self.tensors[index]
        return self._container(tag, depth)

    def _text(self, raw: bytes) -> str:
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise FrameError(self.peer, "string", "is not UTF-8") from None

    def _items(self, n: int, depth: int) -> List[Any]:
        if n > len(self.data) - self.at:  # every item takes at least one byte
            raise FrameError(self.peer, "container length", f"{n} is more than the skeleton holds")
        return [self.get(depth + 1) for _ in range(n)]

    def _container(self, tag: bytes, depth: int) -> Any:
        if tag in (b"l", b"u"):
            items = self._items(self.u32("length"), depth)
            return items if tag == b"l" else tuple(items)
        if tag == b"d":
            items = self._items(2 * self.u32("dict length"), depth)
            try:
                return dict(zip(items[::2], items[1::2]))
            except TypeError:
                raise FrameError(self.peer, "dict key", "is not hashable") from None
        if tag in (b"D", b"n"):
            kind = self._class(self._text(bytes(self.take(self.u32("class name length"), "class name"))), tag)
            return self._instance(kind, self._items(self.u32("field count"), depth), tag)
        raise FrameError(self.peer, "skeleton tag", f"{tag!r} is unknown")

    def _class(self, name: str, tag: bytes) -> type:
        module, _, qualname = name.partition(":")
        obj: Any = sys.modules.get(module)  # never imports: only classes this process already knows
        for part in qualname.split(".") if obj is not None else ():
            # the object's own namespace only: getattr would run a module's __getattr__, which may import
            # (torch_geometric's lazy submodules), or a class's descriptors
            space = obj.__dict__ if isinstance(obj, (type, types.ModuleType)) else {}
            obj = space.get(part)
        ok = isinstance(obj, type) and (dataclasses.is_dataclass(obj) if tag == b"D"
                                        else issubclass(obj, tuple) and hasattr(obj, "_fields"))
        if not ok:
            raise FrameError(self.peer, "message class", f"{name!r} is no message class imported here")
        return obj

    def _instance(self, kind: type, values: List[Any], tag: bytes) -> Any:
        if tag == b"n":
            if len(values) != len(kind._fields):  # type: ignore[attr-defined]
                raise FrameError(self.peer, "field count", f"{len(values)} for {kind.__qualname__}")
            return tuple.__new__(kind, values)
        fields = dataclasses.fields(kind)
        if len(values) != len(fields):
            raise FrameError(self.peer, "field count", f"{len(values)} for {kind.__qualname__} ({len(fields)})")
        obj: Any = object.__new__(kind)
        for f, value in zip(fields, values):
            object.__setattr__(obj, f.name, value)
        return obj


def decode(skeleton: bytes, tensors: List[Tensor], peer: str) -> Any:
    """The message a skeleton and its tensors describe; every tensor used, nothing left over."""
    reader = _Reader(skeleton, tensors, peer)
    out = reader.get()
    if reader.at != len(reader.data):
        raise FrameError(peer, "skeleton", f"has {len(reader.data) - reader.at} bytes after the message")
    return out


__all__ = ["MAGIC", "VERSION", "REQUEST", "REPLY", "PING", "PONG", "HEADER", "ENTRY", "DTYPES",
           "FrameError", "Header", "TensorSpec", "encode", "parse_header",
           "parse_table", "empty_tensor", "tensor_buffer", "decode"]
