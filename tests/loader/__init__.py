"""Tests of pyg_dist.loader."""
