"""Node-level neighbour sampling: :class:`NeighborSampler` (PyG semantics, pyg_dist kernels).

``neighbor.py`` holds the sampler, ``hops.py`` the multi-hop loop over the fused one-hop kernel,
``output.py`` the typed result and its conversion to PyG's outputs.
"""
from pyg_dist.sampler.neighbor import NeighborSampler
from pyg_dist.sampler.output import TypedSample, to_sampler_output

__all__ = ["NeighborSampler", "TypedSample", "to_sampler_output"]
