"""Every loader is PyG's loader class over ONE class of ours (a linear chain), so no behaviour rests on the order
of base classes; its stages are the loader's own methods (:mod:`pyg_dist.loader.pipeline`)."""
from __future__ import annotations

import pytest
from torch_geometric.loader import LinkLoader, NodeLoader

from pyg_dist.distributed.dist_link_neighbor_loader import DistLinkNeighborLoader as PyGDistLink
from pyg_dist.distributed.dist_neighbor_loader import DistNeighborLoader as PyGDistNode
from pyg_dist.loader.dist_link_loader import DistLinkNeighborLoader
from pyg_dist.loader.dist_node_loader import DistNeighborLoader
from pyg_dist.loader.link_loader import LinkNeighborLoader
from pyg_dist.loader.node_loader import NeighborLoader
from pyg_dist.loader.pipeline import DistPipelineLoader, PipelineLoader

LOADERS = [(NeighborLoader, NodeLoader, PipelineLoader), (LinkNeighborLoader, LinkLoader, PipelineLoader),
           (DistNeighborLoader, NodeLoader, DistPipelineLoader),
           (DistLinkNeighborLoader, LinkLoader, DistPipelineLoader)]


def _ours(cls):
    return [c for c in cls.__mro__ if c.__module__.startswith("pyg_dist.")]


@pytest.mark.parametrize("loader,pyg,ours", LOADERS, ids=lambda c: getattr(c, "__name__", ""))
def test_a_loader_is_pygs_class_over_one_of_ours(loader, pyg, ours):
    assert loader.__bases__ == (pyg, ours)
    chain = _ours(loader)[1:]                       # below the loader itself: ours, each with ONE base of ours
    for cls in chain:
        assert len([b for b in cls.__bases__ if b.__module__.startswith("pyg_dist.")]) <= 1, cls
    for stage in ("collate_fn", "filter_fn"):       # the stages are the loader's own methods, not a base's
        assert stage in loader.__dict__, (loader.__name__, stage)
    assert "__iter__" not in pyg.__dict__            # PyG's class does not take the iteration from ours


@pytest.mark.parametrize("loader,base", [(PyGDistNode, DistNeighborLoader), (PyGDistLink, DistLinkNeighborLoader)])
def test_the_migration_layers_loaders_add_no_stage(loader, base):
    assert loader.__bases__[0] is base
    for name in ("__iter__", "collate_fn", "filter_fn", "host_batches"):
        assert name not in loader.__dict__ and all(name not in b.__dict__ for b in loader.__bases__[1:]), name
