"""Tests of pyg_dist.ops: kernels, batch buffers and the numba/torch backend switch."""
