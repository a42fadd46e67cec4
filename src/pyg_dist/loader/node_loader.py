"""``NeighborLoader``: PyG's node-level neighbour loader, driven by pyg_dist's own sampler.

It subclasses PyG's ``NodeLoader`` and takes exactly the arguments of
``torch_geometric.loader.NeighborLoader``, so an existing script works by changing its import; the
sampling runs on :class:`pyg_dist.sampler.neighbor.NeighborSampler` (no pyg-lib / torch-sparse needed)
and PyG's ``filter_fn`` builds the ``Data`` / ``HeteroData`` batches.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from torch import Tensor
from torch_geometric.loader import NodeLoader

from pyg_dist.loader import _checks
from pyg_dist.loader.device import setup_device
from pyg_dist.loader.epoch import node_collate
from pyg_dist.loader.pipeline import PipelineLoader
from pyg_dist.loader.store_batch import pair_batch, pair_node_batch

_WHERE = "NeighborLoader"


#: The loader arguments both one-machine loaders pass through to ``NeighborSampler``.
SAMPLER_ARGS = ("subgraph_type", "replace", "disjoint", "temporal_strategy", "time_attr", "weight_attr", "is_sorted",
                "directed")


def begin(loader, where: str, args: Mapping[str, Any]) -> Optional[bool]:
    """The first checks of both one-machine loaders (``args``: the loader's arguments); sets the seed
    its batch keys come from and returns the ``filter_per_worker`` to use."""
    _checks.check_data(where, args["data"], args["neighbor_sampler"] is not None)
    loader._key_seed = _checks.check_seed(where, args["seed"])
    _checks.check_loader_kwargs(where, args["kwargs"])
    if args["neighbor_sampler"] is None:
        _checks.check_num_neighbors(where, args["num_neighbors"])
    return _checks.default_filter_per_worker(args["data"], args["filter_per_worker"])


def make_local_sampler(args: Mapping[str, Any]):
    """The one-machine loaders' sampler: ``neighbor_sampler`` when given, else a ``NeighborSampler`` over
    ``data`` with the :data:`SAMPLER_ARGS` of ``args`` (its graph in shared memory when workers read it)."""
    if args["neighbor_sampler"] is not None:
        return args["neighbor_sampler"]
    from pyg_dist.sampler.neighbor import NeighborSampler
    return NeighborSampler(args["data"], args["num_neighbors"], **{k: args[k] for k in SAMPLER_ARGS},
                           share_memory=args["kwargs"].get("num_workers", 0) > 0)


class NeighborLoader(NodeLoader, PipelineLoader):
    """Mini-batches of sampled neighbourhoods around seed nodes (PyG's ``NeighborLoader`` semantics).

    Args:
        data: A ``Data``, a ``HeteroData``, or any PyG ``(FeatureStore, GraphStore)`` pair (its
            topology read once through the graph store and cached per pair; each batch's node and edge
            rows fetched with ONE ``feature_store.multi_get_tensor`` call: :mod:`pyg_dist.loader.store_batch`),
            or anything ``neighbor_sampler`` understands.
        num_neighbors: Neighbours per hop, e.g. ``[10, 5]``; ``-1`` takes all. A dict per edge type
            for heterogeneous graphs.
        input_nodes: Seeds: ``None`` (all nodes), ids (a tensor of any integer dtype, a list, a
            ``range``), a bool mask; for heterogeneous data a node type or ``(node_type, ids_or_mask)``.
        input_time: Per-seed time bounds (needs ``time_attr``).
        replace: Sample with replacement.
        subgraph_type: ``"directional"``, ``"bidirectional"`` or ``"induced"`` (every edge of the graph
            among the sampled nodes).
        disjoint: Give every seed its own subgraph (``batch`` tells which).
        temporal_strategy: ``"uniform"`` or ``"last"``.
        time_attr: Name of the node (or edge) time attribute; enables temporal sampling.
        weight_attr: Name of the edge weight attribute for biased sampling.
        transform: Applied to every batch.
        transform_sampler_output: Applied to every ``SamplerOutput``.
        is_sorted: Whether ``edge_index`` is already sorted by column.
        filter_per_worker: Build batches (gather features) inside the workers. ``None`` (default):
            ``False`` for an in-memory CPU graph (workers send only the sampled ids, in one shared
            block, and the batch is built here: measured faster than shipping every feature tensor
            through its own shared-memory segment, ``scripts/bench_workers.py``); PyG's rule otherwise.
        neighbor_sampler: A ready sampler; the sampling arguments above are then ignored.
        directed: Deprecated PyG argument, passed through.
        seed: The loader's seed (pyg_dist only; default: drawn from torch's global generator now). Batch
            ``i`` of epoch ``e`` is then the same whatever ``num_workers`` or ``persistent_workers``
            are (:mod:`pyg_dist.loader.epoch`).
        **kwargs: ``torch.utils.data.DataLoader`` arguments (``batch_size``, ``shuffle``,
            ``num_workers``, ``multiprocessing_context``, ...).
        device: pyg_dist only: ``None`` (default: batches stay on the host, as PyG's) or a CUDA device: batches
            arrive there, pinned and copied on a side stream one batch ahead of the step
            (:mod:`pyg_dist.loader.device`). ``"cuda"`` without CUDA is an ``InvalidArgumentError``.

    Example:
        >>> import pyg_dist
        >>> data = pyg_dist.synthetic_graph(500, 6, num_features=8)
        >>> loader = pyg_dist.NeighborLoader(data, [5, 3], input_nodes=data.train_mask, batch_size=64)
        >>> batch = next(iter(loader))
        >>> batch.batch_size
        64
    """

    def __init__(self, data: Any, num_neighbors: Union[List[int], Dict[Any, List[int]]],
                 input_nodes: Any = None, input_time: Optional[Tensor] = None, replace: bool = False,
                 subgraph_type: str = "directional", disjoint: bool = False,
                 temporal_strategy: str = "uniform", time_attr: Optional[str] = None,
                 weight_attr: Optional[str] = None, transform: Optional[Callable] = None,
                 transform_sampler_output: Optional[Callable] = None, is_sorted: bool = False,
                 filter_per_worker: Optional[bool] = None, neighbor_sampler: Any = None,
                 directed: bool = True, seed: Optional[int] = None, device: Any = None, **kwargs):
        filter_per_worker = begin(self, _WHERE, locals())
        setup_device(self, _WHERE, device)
        input_nodes = _checks.normalize_input_nodes(_WHERE, data, input_nodes)
        num_seeds = _checks.check_input_nodes(_WHERE, data, input_nodes)
        _checks.check_time_args(_WHERE, "input_time", input_time, time_attr, both=False)
        _checks.check_aligned(_WHERE, "input_time", input_time, num_seeds)
        neighbor_sampler = make_local_sampler(locals())
        super().__init__(data=data, node_sampler=neighbor_sampler, input_nodes=input_nodes,
                         input_time=input_time, transform=transform,
                         transform_sampler_output=transform_sampler_output,
                         filter_per_worker=filter_per_worker, **kwargs)

    def collate_fn(self, index):
        """Samples the seeds at ``index`` (a keyed index batch) with the batch's key (stage ``sample``)."""
        return node_collate(self, index)

    def filter_fn(self, out):
        """The batch (stage ``batch``; :func:`~pyg_dist.loader.store_batch.pair_batch`)."""
        return pair_batch(self, out, self.node_sampler, pair_node_batch, NodeLoader.filter_fn)
