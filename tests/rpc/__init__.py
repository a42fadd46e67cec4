"""Tests of pyg_dist.rpc and pyg_dist.context."""
