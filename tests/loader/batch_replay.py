"""Fixed-seed batches of every loader kind, reduced to digests, recorded once and replayed bit for bit.

A change to how loaders are built (the pipeline of issue 54) must not change one byte of one batch. Every
configuration below is a loader with a fixed ``seed`` over a graph the generator draws from a fixed seed; its
batches are reduced to one SHA-256 digest each (every attribute of every node / edge store: name, dtype,
shape and bytes; other values by ``repr``) and compared with ``replay_digests.json``, under the sampling kernel
that drew them (numba and the pure-torch fallback draw different, equally valid samples).

Record (only when a change is MEANT to alter batches, and say so in its commit), once per kernel::

    python -m tests.loader.batch_replay record
    PYG_DIST_BACKEND=torch python -m tests.loader.batch_replay record

The configurations: one-machine ``NeighborLoader`` / ``LinkNeighborLoader`` (homo, hetero, temporal); in 2-rank
worlds, ``DistNeighborLoader`` and ``DistLinkNeighborLoader`` over METIS partitions: node and link (binary and
triplet negatives), sampler workers (fork), bfloat16 batches, int8 remote rows, a remote-feature cache, node and
edge time, hetero node and link.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from typing import Any, Callable, Dict, List

import torch

DIGESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "replay_digests.json")
SEED = 7
MAX_BATCHES = 6     # per loader and rank: enough to cover shuffling, remote rows and the last partial batch
HOMO = dict(num_nodes=600, avg_degree=6, num_features=8, edge_dim=3, seed=1)
TEMPORAL = dict(num_nodes=500, avg_degree=6, num_features=8, node_time=True, edge_time=True, seed=8)
HETERO = dict(num_nodes=600, avg_degree=6, num_features=8, hetero=True, node_types=("paper", "author"), seed=9)


def _feed(h, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, dict):
        for k in sorted(value, key=repr):
            h.update(repr(k).encode())
            _feed(h, value[k])
    elif isinstance(value, (list, tuple)):
        h.update(f"L{len(value)}".encode())
        for v in value:
            _feed(h, v)
    else:
        h.update(repr(value).encode())


def batch_digest(batch) -> str:
    """SHA-256 (first 24 hex digits) of every attribute of every store of a ``Data`` / ``HeteroData``."""
    h = hashlib.sha256(type(batch).__name__.encode())
    _feed(h, batch.to_dict())
    return h.hexdigest()[:24]


def epoch_digests(loader, limit: int = MAX_BATCHES) -> List[str]:
    out = []
    for i, batch in enumerate(loader):
        if i < limit:
            out.append(batch_digest(batch))
    out.append(f"batches={i + 1}")
    return out


# -- one machine ------------------------------------------------------------------------------------------------


def one_machine() -> Dict[str, List[str]]:
    from torch_geometric.sampler import NegativeSampling

    import pyg_dist
    homo, temporal = pyg_dist.synthetic_graph(**HOMO), pyg_dist.synthetic_graph(**TEMPORAL)
    hetero = pyg_dist.synthetic_graph(**HETERO)
    kw = dict(batch_size=64, shuffle=True, seed=SEED)
    loaders: Dict[str, Callable[[], Any]] = {
        "one/node": lambda: pyg_dist.NeighborLoader(homo, [4, 3], input_nodes=homo.train_mask, **kw),
        "one/node_time": lambda: pyg_dist.NeighborLoader(temporal, [4, 3], time_attr="time",
                                                         input_time=temporal.time[:200],
                                                         input_nodes=torch.arange(200), **kw),
        "one/hetero_node": lambda: pyg_dist.NeighborLoader(hetero, [3, 2], input_nodes=("paper", None), **kw),
        "one/link_binary": lambda: pyg_dist.LinkNeighborLoader(homo, [4, 3], neg_sampling=NegativeSampling(
            "binary", 1), edge_label_index=homo.edge_index[:, :300], **kw),
        "one/link_triplet": lambda: pyg_dist.LinkNeighborLoader(homo, [3], neg_sampling=NegativeSampling(
            "triplet", 2), edge_label_index=homo.edge_index[:, :300], **kw),
    }
    return {name: epoch_digests(make()) for name, make in loaders.items()}


# -- two ranks --------------------------------------------------------------------------------------------------


def _dist_loaders(env, kind: str) -> Dict[str, Callable[[], Any]]:
    from torch_geometric.sampler import NegativeSampling

    from pyg_dist.loader.dist_link_loader import DistLinkNeighborLoader
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    kw = dict(batch_size=32, shuffle=True, seed=SEED)
    node = lambda **more: DistNeighborLoader(env, [4, 3], input_nodes="train_mask", **kw, **more)  # noqa: E731
    if kind == "homo":
        return {
            "node": node, "node_bf16": lambda: node(feature_dtype=torch.bfloat16),
            "node_int8": lambda: node(remote_rows="int8"),
            "link_binary": lambda: DistLinkNeighborLoader(env, [4, 3], neg_sampling=NegativeSampling("binary", 1),
                                                          **kw),
            "link_triplet": lambda: DistLinkNeighborLoader(env, [3], neg_sampling=NegativeSampling("triplet", 2),
                                                           **kw)}
    if kind == "workers":   # sampler workers (fork): the same batches as without (pyg_dist.loader.epoch)
        wk = dict(num_workers=2, multiprocessing_context="fork")
        return {"node": lambda: node(**wk),
                "link_binary": lambda: DistLinkNeighborLoader(env, [4, 3], neg_sampling=NegativeSampling("binary", 1),
                                                              **kw, **wk)}
    if kind == "cached":
        return {"node": node, "node_int8": lambda: node(remote_rows="int8")}
    if kind == "temporal":
        return {"node_time": lambda: DistNeighborLoader(env, [4, 3], input_nodes=torch.arange(300),
                                                        input_time=torch.full((300,), 60), time_attr="time", **kw),
                "link_edge_time": lambda: DistLinkNeighborLoader(env, [3, 2], time_attr="edge_time", **kw)}
    return {"node": lambda: DistNeighborLoader(env, [3, 2], input_nodes=("paper", "train_mask"), **kw),
            "link": lambda: DistLinkNeighborLoader(env, [3, 2], edge_label_index=("paper", "to", "author"),
                                                   neg_sampling=NegativeSampling("binary", 1), **kw)}


def _rank(rank: int, world_size: int, root: str, kind: str, workers: int) -> Dict[str, List[str]]:
    from pyg_dist.train.session import TrainConfig, dist_session
    out = {}
    with dist_session(TrainConfig(root, num_workers=workers, timeout=90)) as env:
        for name, make in _dist_loaders(env, kind).items():
            loader = make()
            try:
                out[f"{kind}/{name}/rank{rank}"] = epoch_digests(loader)
            finally:
                loader.shutdown()
    return out


def two_ranks(tmp: str) -> Dict[str, List[str]]:
    import pyg_dist
    from pyg_dist.partition import Partitioner
    from pyg_dist.testing import spawn_world
    graphs = {"homo": (HOMO, {}, 0), "workers": (HOMO, {}, 2), "cached": (HOMO, {"cache_ratio": 0.25}, 0),
              "temporal": (TEMPORAL, {}, 0), "hetero": (HETERO, {}, 0)}
    out: Dict[str, List[str]] = {}
    for kind, (args, extra, workers) in graphs.items():
        root = os.path.join(tmp, kind)
        Partitioner(pyg_dist.synthetic_graph(**args), 2, **extra).save(root, overwrite=True, progress=False)
        for res in spawn_world(2, _rank, root, kind, workers, timeout=240):
            out.update(res)
    return out


def kernel() -> str:
    """The sampling kernel this process uses (``"numba"`` or ``"torch"``): the key of its recorded digests."""
    from pyg_dist.ops.backend import resolve_backend
    return resolve_backend("auto")


def recorded() -> Dict[str, List[str]]:
    with open(DIGESTS) as f:
        everything = json.load(f)
    if kernel() not in everything:
        raise KeyError(f"{DIGESTS} holds no digests for the {kernel()!r} kernel (recorded: {sorted(everything)})")
    return everything[kernel()]


def main(argv: List[str]) -> int:
    if argv != ["record"]:
        print(__doc__)
        return 2
    import importlib
    me = importlib.import_module("tests.loader.batch_replay")   # not __main__: the ranks unpickle me.two_ranks's _rank
    with tempfile.TemporaryDirectory() as tmp:
        digests = {**me.one_machine(), **me.two_ranks(tmp)}
    everything = {}
    if os.path.exists(DIGESTS):
        with open(DIGESTS) as f:
            everything = json.load(f)
    everything[kernel()] = digests
    with open(DIGESTS, "w") as f:
        json.dump(everything, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(digests)} loaders' digests ({kernel()} kernel) to {DIGESTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
