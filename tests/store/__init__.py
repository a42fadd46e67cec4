"""Tests of pyg_dist.store."""
