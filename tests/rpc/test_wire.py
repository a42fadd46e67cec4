"""Integers on the wire as int32 (pyg_dist.rpc.wire): exact round trips, the range edges, untrusted input.

The 2-rank round trip over real RPC is in ``test_rpc.py`` (``_check_wire``).
"""
from dataclasses import dataclass
from typing import NamedTuple, Optional

import pytest
import torch

from pyg_dist.errors import PyGDistError
from pyg_dist.rpc import wire
from pyg_dist.rpc.callees import register_callee, unregister_callee
from pyg_dist.rpc.callees import serve_packed as _remote_serve

N = wire.MIN_NUMEL


@dataclass(frozen=True)
class Req:
    ids: torch.Tensor
    rest: tuple
    extra: Optional[dict] = None

    def __post_init__(self):  # a message that checks itself: pack / unpack must not rerun it
        if self.ids.dtype != torch.int64:
            raise TypeError("ids must be int64")


class Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


def _message():
    big = torch.arange(N) + 2 ** 31                      # does not fit: travels as int64
    return Req(torch.arange(N) * 7, (Pair(torch.arange(N) - 2 ** 31, big), [torch.randn(N, 3), torch.arange(5)]),
               {"edge": torch.full((N,), 2 ** 31 - 1), "mask": torch.ones(N, dtype=torch.bool),
                "i32": torch.arange(N, dtype=torch.int32)})


def _leaves(obj):
    if isinstance(obj, (torch.Tensor, wire.Int32)):
        return [obj]
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _leaves(v)]
    if isinstance(obj, (list, tuple)):
        return [x for v in obj for x in _leaves(v)]
    if hasattr(obj, "__dataclass_fields__"):
        return [x for k in obj.__dataclass_fields__ for x in _leaves(getattr(obj, k))]
    return []


def test_pack_narrows_what_fits_and_unpack_restores_every_tensor_exactly():
    msg = _message()
    packed = wire.pack(msg)
    kinds = [type(x).__name__ if isinstance(x, wire.Int32) else str(x.dtype) for x in _leaves(packed)]
    # ids, 0-based from -2**31, >= 2**31, randn, 5 small, 2**31 - 1, bool, int32
    assert kinds == ["Int32", "Int32", "torch.int64", "torch.float32", "torch.int64", "Int32", "torch.bool",
                     "torch.int32"]
    assert all(x.t.dtype == torch.int32 for x in _leaves(packed) if isinstance(x, wire.Int32))
    assert isinstance(packed.rest[0], Pair) and type(packed.rest[1]) is list
    back, nbytes = wire.unpack(packed, "rank 1")
    for a, b in zip(_leaves(back), _leaves(msg)):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert isinstance(back, Req) and isinstance(back.rest[0], Pair)
    assert msg.ids.dtype == torch.int64 and isinstance(msg.extra["edge"], torch.Tensor)   # msg itself unchanged
    assert nbytes == wire.nbytes(msg) == wire.nbytes(packed) == (N * 4 * 3 + N * 8 + N * 12 + 5 * 8 + N + N * 4)


def test_nothing_to_narrow_keeps_the_same_objects():
    msg = Req(torch.arange(N - 1), (torch.randn(4),), {"t": torch.tensor([2 ** 40] * N)})
    assert wire.pack(msg) is msg
    assert wire.unpack(msg, "p")[0] is msg
    assert wire.pack(None) is None and wire.pack("text") == "text"


@pytest.mark.parametrize("bad", [torch.arange(4), torch.zeros(3), "ids", None])
def test_unpack_refuses_a_narrowed_tensor_that_is_not_int32(bad):
    with pytest.raises(PyGDistError, match="partition 3 .*sent narrowed ids that are not an int32 tensor"):
        wire.unpack(Req(torch.arange(3), (wire.Int32(bad),)), "partition 3 (rpc rank 3)")


def test_the_callee_side_widens_the_payload_and_narrows_the_reply():
    seen = []
    register_callee("wire_echo", lambda msg: seen.append(msg.ids.dtype) or Req(msg.ids + 1, ()), replace=True)
    try:
        reply = _remote_serve("wire_echo", wire.pack(Req(torch.arange(N), ())))
        assert reply.error is None and seen == [torch.int64]
        assert isinstance(reply.value.ids, wire.Int32)
        assert torch.equal(wire.unpack(reply.value, "p")[0].ids, torch.arange(N) + 1)
        tampered = _remote_serve("wire_echo", Req(torch.arange(2), (wire.Int32(torch.zeros(2)),)))
        assert "not an int32 tensor" in tampered.error and seen == [torch.int64]   # refused before the callee
    finally:
        unregister_callee("wire_echo")
