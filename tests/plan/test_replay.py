"""The planner's replay against PyG's k_hop_subgraph and counts worked out by breadth-first search."""
import pytest
import torch
from torch_geometric.utils import k_hop_subgraph, to_undirected

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.plan.replay import Graph, assign, replay


def _graph(n=60, extra=90, seed=3):
    gen = torch.Generator().manual_seed(seed)
    ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
    rnd = torch.randint(0, n, (2, extra), generator=gen)
    rnd = rnd[:, rnd[0] != rnd[1]]
    ei = to_undirected(torch.cat([ring, rnd], 1), num_nodes=n)
    rowptr = torch.zeros(n + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(torch.bincount(ei[0], minlength=n), 0)
    return Graph(rowptr, ei[1]), ei


def _bfs(graph, seeds, hops, owner, part):
    """Every neighbour taken: per hop the frontier = nodes first reached in the hop before."""
    reached, frontier = set(seeds), list(seeds)
    edges = remote_edges = hop_calls = 0
    for _ in range(hops):
        nxt, calls = set(), set()
        for v in frontier:
            nbrs = graph.col[graph.rowptr[v]:graph.rowptr[v + 1]].tolist()
            edges += len(nbrs)
            if owner[v] != part:
                remote_edges += len(nbrs)
                calls.add(int(owner[v]))
            nxt |= {u for u in nbrs if u not in reached}
        hop_calls += len(calls)
        reached |= nxt
        frontier = sorted(nxt)
    remote_rows = [v for v in reached if owner[v] != part]
    return edges, len(reached), remote_edges, len(remote_rows), hop_calls, len({int(owner[v]) for v in remote_rows})


def test_one_part_reaches_exactly_the_k_hop_subgraph():
    graph, ei = _graph()
    owner = torch.zeros(60, dtype=torch.long)
    c = replay(graph, owner, [-1, -1], batch_size=3, batches=1, seed=5)
    gen = torch.Generator().manual_seed(5)  # the seeds replay drew: its first draw of this generator
    seeds = torch.arange(60)[torch.randperm(60, generator=gen)[:3]]
    subset = k_hop_subgraph(seeds, 2, ei, num_nodes=60)[0]
    assert c.rows == subset.numel()
    assert c.remote_edge_frac == 0.0 and c.remote_row_frac == 0.0 and c.hop_calls == 0


def test_two_parts_count_what_another_part_owns():
    graph, _ = _graph()
    owner = (torch.arange(60) >= 30).long()
    c = replay(graph, owner, [-1, -1, -1], batch_size=4, batches=2, seed=7)
    gen = torch.Generator().manual_seed(7)
    want = []
    for part in (0, 1):
        pool = (owner == part).nonzero().flatten()
        seeds = pool[torch.randperm(pool.numel(), generator=gen)[:4]].tolist()
        torch.randint(0, 2**31, (3,), generator=gen)  # the hop keys replay drew after the seeds
        want.append(_bfs(graph, seeds, 3, owner, part))
    mean = [sum(w[i] for w in want) / 2 for i in range(6)]
    assert c.edges == mean[0] and c.rows == mean[1]
    assert c.remote_edge_frac == pytest.approx(mean[2] / mean[0])
    assert c.remote_row_frac == pytest.approx(mean[3] / mean[1])
    assert (c.hop_calls, c.row_calls) == (mean[4], mean[5])
    assert c.max_nodes_frac == 0.5


def test_fanouts_bound_the_sampled_edges():
    graph, _ = _graph()
    c = replay(graph, torch.zeros(60, dtype=torch.long), [2, 2], batch_size=5, batches=4)
    assert 0 < c.edges <= 5 * 2 + 5 * 2 * 2


def test_assign_shapes_and_errors():
    graph, _ = _graph()
    for method in ("metis", "random"):
        owner = assign(graph, 4, method)
        assert owner.shape == (60,) and set(owner.tolist()) == {0, 1, 2, 3}
    assert assign(graph, 1).eq(0).all()
    with pytest.raises(InvalidArgumentError, match="method"):
        assign(graph, 2, "fennel")
    with pytest.raises(InvalidArgumentError, match="num_parts"):
        assign(graph, 0)


def test_no_seed_to_draw_is_an_error():
    graph, _ = _graph()
    empty = Graph(graph.rowptr, graph.col, torch.zeros(60, dtype=torch.bool))
    with pytest.raises(InvalidArgumentError, match="seed"):
        replay(empty, torch.zeros(60, dtype=torch.long), [2], batch_size=4)


@pytest.mark.parametrize("rowptr, col, what", [([0, 2, 1], [1, 0], "rowptr"), ([1, 2, 2], [1, 0], "rowptr"),
                                               ([0, 1, 3], [1, 0], "rowptr"), ([0, 1, 2], [1, 5], "col"),
                                               ([0, 1, 2], [-1, 0], "col")])
def test_a_bad_csr_is_named_before_any_kernel_sees_it(rowptr, col, what):
    with pytest.raises(InvalidArgumentError, match=what):
        Graph(torch.tensor(rowptr), torch.tensor(col)).check("--graph g.pt")
    assert Graph(torch.tensor([0, 1, 2]), torch.tensor([1, 0])).check().num_edges == 2


def test_metis_refuses_a_directed_graph_random_does_not():
    directed = Graph(torch.tensor([0, 1, 2, 2]), torch.tensor([1, 2]))  # 0 -> 1 -> 2
    assert not directed.is_symmetric() and _graph()[0].is_symmetric()
    with pytest.raises(InvalidArgumentError, match="reverse"):
        assign(directed, 2, "metis")
    assert assign(directed, 2, "random").shape == (3,)


def _owned_links(graph, owner, part):
    """Per remote node, how many nodes ``part`` owns link to it (breadth of the product's degree ranking)."""
    counts = {}
    for u in (owner == part).nonzero().flatten().tolist():
        for v in graph.col[graph.rowptr[u]:graph.rowptr[u + 1]].tolist():
            if owner[v] != part:
                counts[v] = counts.get(v, 0) + 1
    return counts


def test_the_replayed_cache_is_the_degree_ranking_within_the_ratio():
    from pyg_dist.plan.replay import cache_masks
    graph, _ = _graph()
    owner = (torch.arange(60) % 3).long()
    masks = cache_masks(graph, owner, 0.3)
    for part in range(3):
        counts = _owned_links(graph, owner, part)
        ranked = sorted(counts, key=lambda v: (-counts[v], v))   # most links first, ties by id
        assert masks[part].nonzero().flatten().tolist() == sorted(ranked[:int(0.3 * 20)])


def test_cached_rows_are_read_there_not_fetched():
    graph, _ = _graph()
    owner = (torch.arange(60) >= 30).long()
    plain = replay(graph, owner, [-1, -1], batch_size=4, batches=2, seed=7)
    cached = replay(graph, owner, [-1, -1], batch_size=4, batches=2, seed=7, cache_ratio=1.0)
    whole = replay(graph, owner, [-1, -1], batch_size=4, batches=2, seed=7, cache_ratio=0.1)
    assert (cached.edges, cached.rows, cached.remote_row_frac) == (plain.edges, plain.rows, plain.remote_row_frac)
    # ratio 1 (as many rows as the part owns): every remote neighbour of an owned node is cached; what is still
    # fetched is two hops out
    assert 0 < cached.cached_row_frac <= cached.remote_row_frac and cached.fetched_row_frac < plain.remote_row_frac
    assert cached.row_calls <= plain.row_calls
    assert 0 < whole.cached_row_frac < cached.cached_row_frac
    assert whole.cache_rows == 3 and plain.cache_rows == 0 and plain.cached_row_frac == 0.0
    with pytest.raises(InvalidArgumentError, match="cache_ratio"):
        replay(graph, owner, [-1], batch_size=4, cache_ratio=1.5)


def test_the_replayed_cache_is_the_one_the_product_fills(tmp_path):
    """The product's own degree ranking (pyg_dist.cache.ranking, on the partition folder's stores) against
    the replay's, on the same partitions: the same counts rank for rank, the same nodes above the last count
    (ties may order differently: the product breaks them by folder id, the replay by original id)."""
    from torch_geometric.data import Data

    from pyg_dist.cache.ranking import degree_ranking
    from pyg_dist.format import meta as M
    from pyg_dist.partition import Partitioner
    from pyg_dist.plan.replay import cache_masks
    from pyg_dist.plan.source import folder_owner
    from pyg_dist.store import load_stores
    graph, ei = _graph(n=120, extra=300)
    Partitioner(Data(edge_index=ei, num_nodes=120, x=torch.randn(120, 4)), 2, method="random").save(
        tmp_path / "p2", progress=False)
    owner = folder_owner(tmp_path / "p2")
    orig = M.load_tensor(M.original_node_ids_path(tmp_path / "p2", "_N")).long()  # folder id -> original id
    masks = cache_masks(graph, owner, 0.25)
    for part in range(2):
        gs, _ = load_stores(tmp_path / "p2", part)
        counts = _owned_links(graph, owner, part)
        k = int(masks[part].sum())
        product = orig[degree_ranking(gs, "_N")[:k]].tolist()
        mine = masks[part].nonzero().flatten().tolist()
        assert k == int(0.25 * int((owner == part).sum())) and len(product) == k
        assert sorted(counts[v] for v in product) == sorted(counts[v] for v in mine)
        last = min(counts[v] for v in mine)
        assert {v for v in product if counts[v] > last} == {v for v in mine if counts[v] > last}
