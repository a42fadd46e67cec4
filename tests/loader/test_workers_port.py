"""A loader's worker-world port: the one asked for when free, a typed error where it cannot apply."""
from __future__ import annotations

import pytest

from pyg_dist.context import DistContext
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.loader import workers
from pyg_dist.testing import free_port


def test_rpc_port_is_used_by_the_worker_world_and_refused_without_workers():
    ctx = DistContext(rank=0, world_size=1, num_partitions=1, master_port=free_port(), num_workers=2)
    port = free_port()
    assert workers.agree_world("L", ctx, 3, 2, port).rpc_port == port           # not rpc_port + 3
    assert workers.agree_world("L", ctx, 3, 2).rpc_port == ctx.rpc_port + 3
    with pytest.raises(InvalidArgumentError, match="rpc_port"):
        workers.loader_kwargs("L", {"num_workers": 0}, ctx, None, port)
    with pytest.raises(InvalidArgumentError, match="rpc_port"):
        workers.loader_kwargs("L", {"num_workers": 2}, ctx, None, 70000)
