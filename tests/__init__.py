"""pyg_dist test suite: the folders mirror the package (partition, store, rpc, ops, sampler, loader),
plus integration."""
