"""A peer's one-hop reply is checked before any kernel indexes with it: ids outside the graph, counts that
do not add up, wrong dtypes are a RemoteCallError naming the partition, never a crash or a wrong batch."""
from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from torch_geometric.sampler import NodeSamplerInput

from pyg_dist.errors import RemoteCallError
from pyg_dist.ops import OneHop
from pyg_dist.sampler.hops import check_reply

ET = ("_N", "_E", "_N")
N = {"_N": 100}


def _hop(nbr, count, edge=None):
    nbr = torch.tensor(nbr, dtype=torch.int64)
    return OneHop(nbr, torch.arange(nbr.numel()) if edge is None else edge, torch.tensor(count, dtype=torch.int64))


def test_a_valid_reply_passes():
    check_reply(1, ET, _hop([3, 99, 0], [2, 1]), 2, N)
    check_reply(1, ET, _hop([], [0, 0]), 2, N)


@pytest.mark.parametrize("hop, seeds, says", [
    (_hop([3, 10_000_000], [1, 1]), 2, r"neighbour ids in \[3, 10000000\] outside \[0, 100\)"),
    (_hop([-1], [1]), 1, r"outside \[0, 100\)"),
    (_hop([3, 4], [1, 1], torch.tensor([0, -5])), 2, "negative edge ids"),
    (_hop([3, 4], [1, 2]), 2, "do not sum"),
    (_hop([3, 4], [2]), 2, "1 counts for 2 seeds"),
    (OneHop(torch.tensor([1.0]), torch.tensor([0]), torch.tensor([1])), 1, "not 1-D int64"),
])
def test_a_bad_reply_is_refused_naming_the_partition(hop, seeds, says):
    with pytest.raises(RemoteCallError, match="partition 1") as info:
        check_reply(1, ET, hop, seeds, N)
    assert info.match(says)


def _evil(serve, request):
    reply = serve(request)
    results = tuple(dataclasses.replace(r, nbr=r.nbr + 10_000_000) for r in reply.results)
    return dataclasses.replace(reply, results=results)


def _rank(rank, world, root):
    from pyg_dist import rpc
    from pyg_dist.context import DistContext
    from pyg_dist.rpc.callees import lookup, register_callee
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler, serve_partition
    from pyg_dist.sampler.messages import ONE_HOP_OP
    from pyg_dist.store import load_stores
    ctx = DistContext.from_env(num_partitions=world)
    gs, fs = load_stores(root, ctx=ctx)
    serve_partition(gs, fs)
    if rank == 1:  # a peer whose replies point outside the graph (a bug, a bad file, a hostile process)
        register_callee(ONE_HOP_OP, functools.partial(_evil, lookup(ONE_HOP_OP)), replace=True)
    with rpc.rpc_session(ctx, timeout=60, call_timeout=30):
        if rank == 1:
            return None
        seeds = fs.get_global_id(None)  # owned by 0; their in-neighbours include partition 1's nodes
        far = torch.arange(seeds.max().item() + 1, seeds.max().item() + 11)  # owned by partition 1
        try:
            DistNeighborSampler(gs, fs, [5, 5]).sample_from_nodes(NodeSamplerInput(None, far))
        except RemoteCallError as exc:
            return str(exc)
        return "no error"


@pytest.mark.timeout(150)
def test_a_peer_replying_ids_outside_the_graph_fails_the_batch_typed(tmp_path):
    import pyg_dist
    from pyg_dist.partition import Partitioner
    from pyg_dist.testing import spawn_world
    Partitioner(pyg_dist.synthetic_graph(400, 5, seed=2), 2, method="random").save(tmp_path / "f", progress=False)
    res = spawn_world(2, _rank, str(tmp_path / "f"), timeout=120)
    assert "partition 1" in res[0] and "outside [0, 400)" in res[0], res[0]
