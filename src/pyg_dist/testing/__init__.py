"""Test helpers: process worlds (:mod:`.world`) and the oracles the suite checks against (:mod:`.oracles`)."""
from pyg_dist.testing.oracles import check_repeats, first_occurrence, in_edges
from pyg_dist.testing.world import RankFailedError, WorldTimeoutError, free_port, free_ports, spawn_world

__all__ = ["spawn_world", "free_port", "free_ports", "RankFailedError", "WorldTimeoutError", "check_repeats",
           "first_occurrence", "in_edges"]
