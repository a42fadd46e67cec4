"""Tests of pyg_dist.sampler."""
