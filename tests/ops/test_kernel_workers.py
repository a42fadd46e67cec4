"""The kernels keep working inside DataLoader worker processes, with fork and with spawn.

The parent runs the parallel numba kernel FIRST (the case that kills forked children under numba's
default 'omp' threading layer), then the workers sample through a pickled / forked NeighborSampler.
"""
import multiprocessing as mp

import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from torch_geometric.sampler import NodeSamplerInput

from pyg_dist.datasets import synthetic_graph
from pyg_dist.ops import CSC, available_backends, numba_unavailable_reason, one_hop
from pyg_dist.sampler import NeighborSampler


class SamplingDataset(Dataset):
    """Item ``i`` = the sampled node set around seed ``i`` (plus the one-hop count check)."""

    def __init__(self, sampler: NeighborSampler, csc: CSC):
        self.sampler, self.csc = sampler, csc

    def __len__(self):
        return 8

    def __getitem__(self, i):
        out = self.sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([i, i + 10])))
        hop = one_hop(self.csc, torch.tensor([i]), 3)
        return out.node, out.row, out.col, out.edge, hop.count


def _collate(items):
    return items


@pytest.mark.timeout(240)
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_sampling_in_dataloader_workers(context):
    if context not in mp.get_all_start_methods():
        pytest.skip(f"start method {context} is not available on this platform")
    if "numba" not in available_backends():
        pytest.skip(f"needs the numba kernels: {numba_unavailable_reason()}")
    data = synthetic_graph(400, 6, seed=2)
    sampler = NeighborSampler(data, [5, 3], backend="numba")
    csc = sampler.graph.csc[("_N", "_E", "_N")]
    sampler.sample_from_nodes(NodeSamplerInput(None, torch.arange(16)))  # parent uses the kernel first
    loader = DataLoader(SamplingDataset(sampler, csc), batch_size=2, num_workers=2,
                        multiprocessing_context=context, collate_fn=_collate, timeout=200)
    items = [item for batch in loader for item in batch]
    assert len(items) == 8
    ei = data.edge_index
    for i, (node, row, col, edge, count) in enumerate(items):
        assert node[:2].tolist() == [i, i + 10]
        assert (ei[0, edge] == node[row]).all() and (ei[1, edge] == node[col]).all()
        assert count.tolist() == [min(3, int((ei[1] == i).sum()))]
