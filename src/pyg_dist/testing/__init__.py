"""Test helpers for pyg_dist's suite, kept in the package so test files never import each other.

Process worlds (:mod:`.world`), the oracles the suite checks against (:mod:`.oracles`), partition
folders (:mod:`.folders`: exact reassembly, folders in PyG's own layout) and an emulated NIC for
benchmarks on one machine (:mod:`.link`).

Importing this package has no side effects: ``torch_geometric`` and the partition reader are imported
when a helper first needs them.
"""
from pyg_dist.testing.folders import check_roundtrip, reassemble, write_pyg_hetero, write_pyg_homo
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
from pyg_dist.testing.world import RankFailedError, WorldTimeoutError, free_port, free_ports, spawn_world

__all__ = ["spawn_world", "free_port", "free_ports", "RankFailedError", "WorldTimeoutError", "check_repeats",
           "first_occurrence", "in_edges", "typed_stores", "original_attrs", "relabelled", "typed_k_hop",
           "check_edges_and_features", "reassemble", "check_roundtrip", "write_pyg_homo", "write_pyg_hetero",
           "EmulatedLink", "throttle_callees"]
