"""Link-level seeds (pyg_dist.sampler.links) against PyG's own ``edge_sample`` and exact invariants.

The node-level sampler is replaced by a recorder that returns the seeds it was given, so these tests
check the negative sampling, seed layout and metadata alone, with PyG's ``edge_sample`` as the oracle
(same torch RNG state -> the same negatives).
"""
from dataclasses import dataclass
from typing import Dict, Optional

import pytest
import torch
from torch_geometric.sampler import EdgeSamplerInput, HeteroSamplerOutput, NegativeSampling, SamplerOutput
from torch_geometric.sampler.neighbor_sampler import edge_sample as pyg_edge_sample

from pyg_dist._types import HOMO_NODE
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.sampler.links import (
    FilteredNegativeSampling,
    LinkMetadata,
    TripletMetadata,
    contains_edges,
    draw_negatives,
    edge_keys,
    sample_edges,
)


@dataclass
class _Seeds:
    """Stands in for TypedSample: the 'sampled' nodes are the seeds themselves."""
    node: Dict[str, torch.Tensor]
    batch: Optional[Dict[str, torch.Tensor]]


def _ours_fn(disjoint, record):
    def fn(seed, seed_time):
        record.append((seed, seed_time))
        batch = {k: torch.arange(v.numel()) for k, v in seed.items()} if disjoint else None
        return _Seeds(dict(seed), batch)
    return fn


def _pyg_fn(disjoint, record):
    def fn(seed, seed_time):
        record.append((seed, seed_time))
        empty = torch.empty(0, dtype=torch.long)
        if isinstance(seed, dict):
            batch = {k: torch.arange(v.numel()) for k, v in seed.items()} if disjoint else None
            return HeteroSamplerOutput(dict(seed), {}, {}, {}, batch)
        return SamplerOutput(seed, empty, empty, None, torch.arange(seed.numel()) if disjoint else None)
    return fn


def _equal(a, b):
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a.shape == b.shape and torch.equal(a, b)


NEGS = [None, ("binary", 1), ("binary", 1.5), ("binary", 3), ("triplet", 1), ("triplet", 3)]
TYPES = [None, ("a", "to", "a"), ("a", "to", "b")]


@pytest.mark.parametrize("neg", NEGS)
@pytest.mark.parametrize("input_type", TYPES)
@pytest.mark.parametrize("disjoint,temporal,labelled", [(False, False, False), (True, False, True),
                                                          (True, True, False), (False, False, True)])
def test_metadata_equals_pyg_edge_sample(neg, input_type, disjoint, temporal, labelled):
    gen = torch.Generator().manual_seed(7)
    num = {"a": 20, "b": 30} if input_type else {HOMO_NODE: 25}
    src_t, dst_t = (input_type[0], input_type[-1]) if input_type else (HOMO_NODE, HOMO_NODE)
    pos = 9
    row = torch.randint(num[src_t], (pos,), generator=gen)
    col = torch.randint(num[dst_t], (pos,), generator=gen)
    label = torch.randint(1, 4, (pos,), generator=gen) if labelled and (neg is None or neg[0] == "binary") \
        else None
    time = torch.randint(0, 50, (pos,), generator=gen) if temporal else None
    inputs = EdgeSamplerInput(torch.arange(100, 100 + pos), row, col, label, time, input_type)
    neg_s = NegativeSampling(*neg) if neg else None

    rec_ours, rec_pyg = [], []
    torch.manual_seed(123)
    sample, meta = sample_edges(inputs, neg_s, _ours_fn(disjoint, rec_ours), num, None, disjoint)
    torch.manual_seed(123)
    pyg_num = num if input_type else num[HOMO_NODE]
    out = pyg_edge_sample(inputs, _pyg_fn(disjoint, rec_pyg), pyg_num, disjoint, None, neg_s)

    (seed, seed_time), (pyg_seed, pyg_seed_time) = rec_ours[0], rec_pyg[0]
    if input_type is None:
        pyg_seed = {HOMO_NODE: pyg_seed}
        pyg_seed_time = None if pyg_seed_time is None else {HOMO_NODE: pyg_seed_time}
    assert _equal(seed, pyg_seed)
    assert _equal(seed_time, pyg_seed_time)
    pyg_batch = out.batch if input_type or out.batch is None else {HOMO_NODE: out.batch}
    num_neg = len(meta[1][0]) - pos if isinstance(meta, LinkMetadata) else 0
    if num_neg % pos == 0:  # PyG's `batch % num_pos` is right only then (see sample_edges)
        assert _equal(sample.batch, pyg_batch)
    if temporal:  # every seed carries the time of the positive its subgraph belongs to
        for t, b in sample.batch.items():
            assert torch.equal(seed_time[t], time[b])
    assert isinstance(meta, TripletMetadata if neg and neg[0] == "triplet" else LinkMetadata)
    assert len(meta) == len(out.metadata)
    for ours, theirs in zip(meta, out.metadata):
        assert _equal(ours, theirs)


def test_binary_labels_and_counts():
    inputs = EdgeSamplerInput(None, torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 4]))
    _, meta = sample_edges(inputs, NegativeSampling("binary", 1.5), _ours_fn(False, []), {HOMO_NODE: 10})
    assert meta.edge_label.dtype == torch.float
    assert meta.edge_label.tolist() == [1.0] * 4 + [0.0] * 6  # ceil(1.5 * 4) negatives
    assert meta.edge_label_index.shape == (2, 10)


def test_layout_points_back_to_endpoints():
    """n_id[edge_label_index] recovers the positive edges exactly (deduplicated and disjoint)."""
    row, col = torch.tensor([5, 3, 5, 9]), torch.tensor([3, 8, 1, 3])
    inputs = EdgeSamplerInput(None, row, col, None, None, ("a", "to", "b"))
    for disjoint in (False, True):
        for neg in (None, NegativeSampling("binary", 2), NegativeSampling("triplet", 2)):
            sample, meta = sample_edges(inputs, neg, _ours_fn(disjoint, []), {"a": 10, "b": 10},
                                        None, disjoint)
            src = sample.node["a"][meta[1][0] if not isinstance(meta, TripletMetadata) else meta.src_index]
            dst_index = meta.dst_pos_index if isinstance(meta, TripletMetadata) else meta.edge_label_index[1]
            assert torch.equal(src[:4], row)
            assert torch.equal(sample.node["b"][dst_index][:4], col)
            if isinstance(meta, TripletMetadata):
                assert meta.dst_neg_index.shape == (4, 2)


def test_temporal_negatives_respect_seed_time():
    gen = torch.Generator().manual_seed(0)
    node_time = torch.randint(0, 100, (200,), generator=gen)
    seed_time = torch.randint(20, 100, (500,), generator=gen)
    neg = draw_negatives(500, 200, None, seed_time, node_time)
    assert neg.numel() == 500
    assert bool((node_time[neg] <= seed_time).all())
    # infeasible bound: falls back to the earliest node (PyG's rule), never dropped
    early = draw_negatives(3, 200, None, torch.full((3,), -1), node_time)
    assert early.tolist() == [int(node_time.argmin())] * 3


def test_temporal_link_seeds_carry_times():
    """Triplet negative dst_neg_index[i, k] is seeded with positive i's time (disjoint layout)."""
    time = torch.tensor([10, 20, 30])
    inputs = EdgeSamplerInput(None, torch.tensor([0, 1, 2]), torch.tensor([3, 4, 5]), None, time)
    node_time = {HOMO_NODE: torch.arange(40) % 25}
    rec = []
    _, meta = sample_edges(inputs, NegativeSampling("triplet", 4), _ours_fn(True, rec), {HOMO_NODE: 40},
                           node_time, disjoint=True)
    seed, seed_time = rec[0][0][HOMO_NODE], rec[0][1][HOMO_NODE]
    assert torch.equal(seed_time[meta.dst_neg_index], time.view(-1, 1).expand(3, 4))
    assert bool((node_time[HOMO_NODE][seed[meta.dst_neg_index]] <= time.view(-1, 1)).all())
    assert torch.equal(meta.seed_time, time)


def test_edge_keys_membership_matches_python_sets():
    gen = torch.Generator().manual_seed(1)
    src, dst = torch.randint(0, 30, (200,), generator=gen), torch.randint(0, 40, (200,), generator=gen)
    keys = edge_keys(src, dst, 40)
    assert bool((keys[1:] > keys[:-1]).all())
    qs, qd = torch.randint(0, 30, (500,), generator=gen), torch.randint(0, 40, (500,), generator=gen)
    known = set(zip(src.tolist(), dst.tolist()))
    expected = [(s, d) in known for s, d in zip(qs.tolist(), qd.tolist())]
    assert contains_edges(keys, qs, qd, 40).tolist() == expected
    assert not contains_edges(edge_keys(src[:0], dst[:0], 40), qs, qd, 40).any()


@pytest.mark.parametrize("mode", ["binary", "triplet"])
def test_filtered_negatives_avoid_known_edges(mode):
    gen = torch.Generator().manual_seed(2)
    n = 12  # dense: a third of all pairs are edges, so unfiltered negatives collide often
    src, dst = torch.randint(0, n, (60,), generator=gen), torch.randint(0, n, (60,), generator=gen)
    keys = edge_keys(src, dst, n)
    neg = FilteredNegativeSampling(mode, 3, known_keys=keys, num_dst=n, max_tries=50)
    inputs = EdgeSamplerInput(None, src[:20], dst[:20])
    torch.manual_seed(0)
    sample, meta = sample_edges(inputs, neg, _ours_fn(False, []), {HOMO_NODE: n})
    nodes = sample.node[HOMO_NODE]
    if mode == "binary":
        s, d = nodes[meta.edge_label_index[:, 20:]]
    else:
        s = nodes[meta.src_index].view(-1, 1).expand(-1, 3).reshape(-1)
        d = nodes[meta.dst_neg_index].reshape(-1)
    assert not contains_edges(keys, s, d, n).any()
    assert s.numel() == 60


def test_invalid_inputs_are_typed():
    fn = _ours_fn(False, [])
    bad_row = EdgeSamplerInput(None, torch.tensor([0, 11]), torch.tensor([1, 2]))
    with pytest.raises(InvalidArgumentError, match="inputs.row"):
        sample_edges(bad_row, None, fn, {HOMO_NODE: 10})
    timed = EdgeSamplerInput(None, torch.tensor([0]), torch.tensor([1]), None, torch.tensor([3]))
    with pytest.raises(InvalidArgumentError, match="inputs.time"):
        sample_edges(timed, None, fn, {HOMO_NODE: 10}, disjoint=False)
    labelled = EdgeSamplerInput(None, torch.tensor([0]), torch.tensor([1]), torch.tensor([1]))
    with pytest.raises(InvalidArgumentError, match="inputs.label"):
        sample_edges(labelled, NegativeSampling("triplet"), fn, {HOMO_NODE: 10})
    ok = EdgeSamplerInput(None, torch.tensor([0]), torch.tensor([1]))
    with pytest.raises(InvalidArgumentError, match="dst_weight"):
        sample_edges(ok, NegativeSampling("binary", 1, None, torch.ones(3)), fn, {HOMO_NODE: 10})
    typed = EdgeSamplerInput(None, torch.tensor([0]), torch.tensor([1]), None, None, ("x", "r", "y"))
    with pytest.raises(InvalidArgumentError, match="input_type"):
        sample_edges(typed, None, fn, {"x": 3})
