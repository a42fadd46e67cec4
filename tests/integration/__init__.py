"""End-to-end tests: the examples and demo under real launchers, accuracy parity, network namespaces,
training, and the script entry points (pyg_dist.train.session, pyg_dist.train.entry)."""
