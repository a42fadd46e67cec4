"""int32 ids in a CSC (``CSC.compact``): narrowed only where every value fits, and sampling reads them to the
same samples as the int64 CSC, on every backend and mode (the oracle is the int64 CSC's own output)."""
import dataclasses

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.sampler import NodeSamplerInput

from pyg_dist import NeighborSampler
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.ops import CSC, available_backends, make_edge_buffer, make_relabeler, one_hop, sample_hop

BACKENDS = [b for b in ("numba", "torch") if b in available_backends()]
BIG = 2**31


def _graph(n=80, e=900, seed=3):
    g = torch.Generator().manual_seed(seed)
    ei = torch.unique(torch.randint(0, n, (2, e), generator=g), dim=1)
    ei = ei[:, torch.randperm(ei.size(1), generator=g)]
    weight = torch.rand(ei.size(1), generator=g, dtype=torch.float64)
    weight[::7] = 0.0  # zero weights are never drawn
    return ei, n, weight, torch.randint(0, 50, (ei.size(1),), generator=g), torch.randint(0, 50, (n,), generator=g)


def test_compact_narrows_only_ids_that_fit():
    csc = CSC.from_edge_index(torch.tensor([[0, BIG - 1], [1, 0]]), num_dst=2)  # edge ids [1, 0]: not a run
    small = csc.compact()
    assert small.row.dtype == torch.int32 and small.edge_id.dtype == torch.int32
    assert small.row.tolist() == csc.row.tolist() and small.edge_id.tolist() == csc.edge_id.tolist()
    assert small.colptr is csc.colptr and small.validate() is small
    wide = CSC.from_edge_index(torch.tensor([[0, BIG], [1, 0]]), num_dst=2)
    out = wide.compact()  # one id past int32: row stays int64 (each field on its own)
    assert out.row is wide.row and out.edge_id.dtype == torch.int32
    mixed = dataclasses.replace(csc, edge_id=torch.tensor([BIG + 5, 1]))
    out = mixed.compact()
    assert out.row.dtype == torch.int32 and out.edge_id.dtype == torch.int64 and out.edge_id.tolist() == [BIG + 5, 1]
    neg = CSC(torch.tensor([0, 1]), torch.tensor([-1]))
    assert neg.compact() is neg
    sorted_csc = CSC.from_edge_index(torch.tensor([[1, 0], [0, 1]]), num_dst=2, is_sorted=True).compact()
    assert sorted_csc.edge_id is None and sorted_csc.row.dtype == torch.int32
    assert CSC(torch.tensor([0, 1]), torch.tensor([BIG])).compact().row.dtype == torch.int64
    empty = CSC(torch.zeros(1, dtype=torch.long), torch.empty(0, dtype=torch.long))
    assert empty.compact() is empty


def test_compact_drops_edge_ids_that_are_one_run():
    """A partition's edges numbered in CSC order keep only their first id; any other order keeps the array."""
    ei = torch.tensor([[3, 1, 2, 0], [0, 0, 1, 2]])
    run = CSC.from_edge_index(ei, num_dst=3, edge_id=torch.arange(100, 104)).compact()
    assert run.edge_id is None and run.edge_offset == 100 and run.validate() is run
    assert run.edge_ids().tolist() == [100, 101, 102, 103] and run.edge_ids(torch.tensor([2, 0])).tolist() == [102, 100]
    for ids in ([100, 101, 103, 104], [101, 100, 102, 103], [BIG, BIG + 1, BIG + 2, BIG + 3 - 4]):
        kept = CSC(run.colptr, run.row, torch.tensor(ids)).compact()
        assert kept.edge_ids().tolist() == ids and kept.edge_offset == 0
    chunked = torch.arange(7, 7 + 50)
    chunked[37] += 1  # a break inside a later chunk of the check
    from pyg_dist.ops.csc import _is_run
    assert _is_run(torch.arange(7, 57), chunk=8) and not _is_run(chunked, chunk=8)
    high = CSC(run.colptr, run.row, torch.arange(BIG, BIG + 4)).compact()  # a run past int32: still dropped
    assert high.edge_id is None and high.edge_ids().tolist() == list(range(BIG, BIG + 4))


def test_edge_offset_is_checked():
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidArgumentError, match="edge_offset"):
            CSC(torch.tensor([0, 1]), torch.tensor([0]), edge_offset=bad).validate()
    with pytest.raises(InvalidArgumentError, match="edge_offset"):
        CSC(torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([4]), edge_offset=3).validate()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_csc_without_edge_ids_samples_what_the_one_with_them_samples(backend):
    """The kernels hand out ``position + edge_offset``: the same edges and ids as the explicit id array."""
    ei, n, *_ = _graph()
    sorted_ei = ei[:, torch.sort(ei[1], stable=True).indices]
    wide = CSC.from_edge_index(sorted_ei, n, edge_id=torch.arange(5000, 5000 + ei.size(1)), is_sorted=True)
    small = wide.compact()
    assert small.edge_id is None and small.edge_offset == 5000
    seeds = torch.arange(n)
    for kw in ({}, {"replace": True}):
        a, b = (one_hop(c, seeds, 4, backend=backend, key=77, **kw) for c in (wide, small))
        assert torch.equal(a.nbr, b.nbr) and torch.equal(a.edge, b.edge) and a.edge.min() >= 5000
        assert torch.equal(sorted_ei[0, a.edge - 5000], a.nbr)  # each id names the edge it came from


def test_validate_names_an_id_dtype_it_cannot_read():
    with pytest.raises(InvalidArgumentError, match="row"):
        CSC(torch.tensor([0, 1]), torch.tensor([0], dtype=torch.int16)).validate()
    with pytest.raises(InvalidArgumentError, match="edge_id"):
        CSC(torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([0.0])).validate()


MODES = {
    "uniform": {},
    "replace": {"replace": True},
    "all": {"k": -1},
    "weighted": {"weight": True},
    "node_time": {"node_time": True},
    "edge_time": {"edge_time": True},
    "last": {"edge_time": True, "temporal_strategy": "last"},
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", list(MODES))
def test_int32_csc_samples_what_the_int64_csc_samples(backend, mode):
    opt = dict(MODES[mode])
    ei, n, weight, etime, ntime = _graph()
    wide = CSC.from_edge_index(ei, n, weight=weight if opt.pop("weight", False) else None,
                               edge_time=etime if opt.get("edge_time") else None)
    small = wide.compact()
    assert small.row.dtype == torch.int32 and small.edge_id.dtype == torch.int32
    seeds = torch.arange(n)
    temporal = opt.pop("edge_time", False) or opt.get("node_time", False)
    kw = dict(replace=opt.pop("replace", False), temporal_strategy=opt.pop("temporal_strategy", "uniform"),
              node_time=ntime if opt.pop("node_time", False) else None,
              seed_time=torch.full((n,), 25) if temporal else None, backend=backend, key=1234)
    k = opt.pop("k", 4)
    a, b = one_hop(wide, seeds, k, **kw), one_hop(small, seeds, k, **kw)
    assert b.nbr.dtype == b.edge.dtype == torch.int64
    assert torch.equal(a.nbr, b.nbr) and torch.equal(a.edge, b.edge) and torch.equal(a.count, b.count)
    assert a.nbr.numel() > 0
    hops = []
    for csc in (wide, small):
        rel = make_relabeler(n, backend=backend)
        hop = sample_hop(csc, seeds, 0, k, rel, out=make_edge_buffer(backend), **kw)
        hops.append((hop.row, hop.col, hop.edge, rel.nodes.clone()))
        rel.close()
    assert all(torch.equal(x, y) for x, y in zip(*hops))


def test_neighbor_sampler_keeps_int32_ids_and_the_same_batches():
    """The one-machine sampler narrows its CSC for the numba kernels; its batches are those of the int64
    CSC, which the batch oracle (every edge exists, the endpoints' global ids) confirms."""
    if "numba" not in BACKENDS:
        pytest.skip("needs the numba kernels (the torch backend keeps int64 ids)")
    ei, n, *_ = _graph(n=300, e=3000)
    data = Data(edge_index=ei, num_nodes=n)
    sampler = NeighborSampler(data, [5, 3], backend="numba")
    (et, csc), = sampler.graph.csc.items()
    assert csc.row.dtype == torch.int32 and csc.edge_id.dtype == torch.int32
    wide = NeighborSampler(data, [5, 3], backend="numba")
    wide.graph.csc[et] = CSC(csc.colptr, csc.row.long(), csc.edge_id.long())
    seeds = torch.arange(0, n, 7)
    for s in (sampler, wide):
        torch.manual_seed(5)
        s.out = s.sample_from_nodes(NodeSamplerInput(None, seeds))
    a, b = sampler.out, wide.out
    for name in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.row.numel() > len(seeds)
    assert torch.equal(ei[0, a.edge], a.node[a.row]) and torch.equal(ei[1, a.edge], a.node[a.col])


def test_torch_backend_keeps_int64_ids():
    ei, n, *_ = _graph()
    sampler = NeighborSampler(Data(edge_index=ei, num_nodes=n), [2], backend="torch")
    assert all(c.row.dtype == torch.int64 for c in sampler.graph.csc.values())
