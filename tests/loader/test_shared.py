"""pack_shared: a worker's sampler output leaves in one shared-memory block, values unchanged."""
import torch
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput

from pyg_dist.loader.shared import pack_shared


def test_every_tensor_moves_into_one_shared_block_with_equal_values():
    out = SamplerOutput(node=torch.arange(5), row=torch.tensor([1, 2]), col=torch.tensor([0, 0]),
                        edge=torch.tensor([7, 9]), num_sampled_nodes=[2, 3], num_sampled_edges=[2],
                        metadata=(torch.tensor([3, 4]), torch.tensor([0.5, 1.5], dtype=torch.float64)))
    packed = pack_shared(out)
    tensors = [packed.node, packed.row, packed.col, packed.edge, *packed.metadata]
    assert all(t.is_shared() for t in tensors)
    assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1      # one block, one segment
    for a, b in zip(tensors, [out.node, out.row, out.col, out.edge, *out.metadata]):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert packed.num_sampled_nodes == [2, 3] and packed.batch is None


def test_hetero_dicts_and_already_shared_tensors():
    shared = torch.tensor([1, 2]).share_memory_()
    out = HeteroSamplerOutput(node={"a": torch.arange(3), "b": shared}, row={("a", "r", "b"): torch.tensor([0])},
                              col={("a", "r", "b"): torch.tensor([1])}, edge={("a", "r", "b"): None},
                              metadata=(None, None))
    packed = pack_shared(out)
    assert packed.node["b"] is shared and torch.equal(packed.node["a"], torch.arange(3))
    assert packed.node["a"].is_shared() and packed.edge[("a", "r", "b")] is None
    assert packed.node["a"].untyped_storage().data_ptr() == packed.row[("a", "r", "b")].untyped_storage().data_ptr()
