"""Tests of pyg_dist.partition (folders, CLI) and pyg_dist.datasets."""
