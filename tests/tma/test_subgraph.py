"""``local_subgraph``: exactly the owned nodes and the edges among them, rows equal the originals."""
from __future__ import annotations

import pytest
import torch

import pyg_dist
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.format import load_book, load_original_ids, read_meta
from pyg_dist.partition import Partitioner
from pyg_dist.tma import local_subgraph


def _check(root, data, orig, parts):
    from torch_geometric.data import HeteroData
    hetero = isinstance(data, HeteroData)
    book = load_book(read_meta(root))
    ntypes = data.node_types if hetero else ["_N"]
    etypes = data.edge_types if hetero else [("_N", "_E", "_N")]
    seen = {t: torch.zeros((data[t] if hetero else data).num_nodes, dtype=torch.long) for t in ntypes}
    for p in range(parts):
        sub = local_subgraph(root, p)
        for t in ntypes:
            s, o = (sub[t], data[t]) if hetero else (sub, data)
            assert bool((book.owner(t, s.global_id) == p).all())
            oid = orig[t][s.global_id]
            seen[t][oid] += 1
            assert torch.equal(s.x, o.x[oid])
        for et in etypes:
            s, o = (sub[et], data[et]) if hetero else (sub, data)
            src_t, dst_t = et[0], et[2]
            g_src = (sub[src_t] if hetero else sub).global_id[s.edge_index[0]]
            g_dst = (sub[dst_t] if hetero else sub).global_id[s.edge_index[1]]
            oe = orig[et][s.global_edge_id]
            assert torch.equal(o.edge_index[0, oe], orig[src_t][g_src])           # the original edges
            assert torch.equal(o.edge_index[1, oe], orig[dst_t][g_dst])
            if "edge_attr" in o:
                assert torch.equal(s.edge_attr, o.edge_attr[oe])
            own_src = torch.isin(o.edge_index[0], orig[src_t][book.owned_ids(src_t, p)])
            own_dst = torch.isin(o.edge_index[1], orig[dst_t][book.owned_ids(dst_t, p)])
            internal = (own_src & own_dst).nonzero().view(-1)                      # oracle: no halo, none lost
            assert sorted(oe.tolist()) == internal.tolist()
    assert all(bool((v == 1).all()) for v in seen.values())


@pytest.mark.parametrize("method", ["metis", "random", "supernode", "hybrid"])
def test_local_subgraph_is_the_internal_graph(tmp_path, method):
    data = pyg_dist.synthetic_graph(400, 6, num_features=4, edge_dim=2, seed=5)
    Partitioner(data, 3, method=method).save(tmp_path / "p", progress=False)
    _check(tmp_path / "p", data, load_original_ids(tmp_path / "p"), 3)


def test_local_subgraph_hetero_and_pyg_layout(tmp_path):
    from pyg_dist.distributed import Partitioner as PyGPartitioner
    data = pyg_dist.synthetic_graph(400, 6, num_features=4, hetero=True, seed=5)
    Partitioner(data, 2, method="random").save(tmp_path / "n", progress=False)
    _check(tmp_path / "n", data, load_original_ids(tmp_path / "n"), 2)
    PyGPartitioner(data, 2, str(tmp_path / "pyg")).generate_partition(progress=False)
    ident = {k: torch.arange(data[k].num_nodes if isinstance(k, str) else data[k].num_edges)
             for k in data.node_types + data.edge_types}
    _check(tmp_path / "pyg", data, ident, 2)


def test_local_subgraph_rejects_a_bad_partition(tmp_path):
    data = pyg_dist.synthetic_graph(100, 4, seed=5)
    Partitioner(data, 2, method="random").save(tmp_path / "p", progress=False)
    with pytest.raises(InvalidArgumentError, match="part"):
        local_subgraph(tmp_path / "p", 2)


@pytest.mark.parametrize("method", ["metis", "hybrid"])
def test_whole_graph_is_the_input_relabelled(tmp_path, method):
    from pyg_dist.tma import whole_graph
    data = pyg_dist.synthetic_graph(300, 5, num_features=4, seed=7)
    Partitioner(data, 3, method=method).save(tmp_path / "p", progress=False)
    orig = load_original_ids(tmp_path / "p")
    full = whole_graph(tmp_path / "p")
    on, oe = orig["_N"], orig[("_N", "_E", "_N")]
    assert torch.equal(full.x, data.x[on]) and torch.equal(full.train_mask, data.train_mask[on])
    assert torch.equal(on[full.edge_index], data.edge_index[:, oe])             # edge e is original edge oe[e]
