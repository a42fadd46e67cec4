"""Test helpers for pyg_dist's suite, kept in the package so test files never import each other.

Process worlds (:mod:`.world`), the oracles the suite checks against (:mod:`.oracles`), partition
folders (:mod:`.folders`: exact reassembly, folders in PyG's own layout) and an emulated NIC for
benchmarks on one machine (:mod:`.link`).

Importing this package has no side effects: ``torch_geometric`` and the partition reader are imported
when a helper first needs them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.testing.folders import (
        check_roundtrip,
        partitioned,
        reassemble,
        served_folders,
        write_pyg_hetero,
        write_pyg_homo,
    )
    from pyg_dist.testing.link import EmulatedLink, throttle_callees
    from pyg_dist.testing.oracles import (
        check_edges_and_features,
        check_repeats,
        first_occurrence,
        in_edges,
        original_attrs,
        relabelled,
        typed_k_hop,
        typed_stores,
    )
    from pyg_dist.testing.scripts import load_script
    from pyg_dist.testing.world import RankFailedError, WorldTimeoutError, free_port, free_ports, spawn_world

_LAZY = {
    # public name: the module that defines it
    "check_roundtrip": "pyg_dist.testing.folders",
    "partitioned": "pyg_dist.testing.folders",
    "reassemble": "pyg_dist.testing.folders",
    "served_folders": "pyg_dist.testing.folders",
    "write_pyg_hetero": "pyg_dist.testing.folders",
    "write_pyg_homo": "pyg_dist.testing.folders",
    "EmulatedLink": "pyg_dist.testing.link",
    "load_script": "pyg_dist.testing.scripts",
    "throttle_callees": "pyg_dist.testing.link",
    "check_edges_and_features": "pyg_dist.testing.oracles",
    "check_repeats": "pyg_dist.testing.oracles",
    "first_occurrence": "pyg_dist.testing.oracles",
    "in_edges": "pyg_dist.testing.oracles",
    "original_attrs": "pyg_dist.testing.oracles",
    "relabelled": "pyg_dist.testing.oracles",
    "typed_k_hop": "pyg_dist.testing.oracles",
    "typed_stores": "pyg_dist.testing.oracles",
    "RankFailedError": "pyg_dist.testing.world",
    "WorldTimeoutError": "pyg_dist.testing.world",
    "free_port": "pyg_dist.testing.world",
    "free_ports": "pyg_dist.testing.world",
    "spawn_world": "pyg_dist.testing.world",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
