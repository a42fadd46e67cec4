"""One entry point for every graph source: ``load_dataset(name, root, **opts)``.

Names: ``cora`` / ``citeseer`` / ``pubmed`` (Planetoid raw files), ``ogbn-*`` (an unpacked OGB
node-property folder), ``edgelist`` (``root`` = edge file or folder), ``synthetic`` (the built-in
generator; ``opts`` are :func:`~pyg_dist.datasets.synthetic.synthetic_graph` arguments) and ``products_like``
(``root`` = a ``{rowptr, col, N}`` file written by the shared benchmark generator).

Every reader takes ``undirected``: ``True`` adds the reverse of every edge whose reverse is missing
(:func:`symmetrize`; idempotent, so an already symmetric graph is unchanged and no edge is ever
dropped), ``False`` keeps the edges as stored, ``None`` (default) follows the dataset's convention
(OGB's table of datasets stored one direction per line; as stored otherwise).
:func:`edge_direction_report` says which the loaded graph is.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Optional, Union

import torch

from pyg_dist.errors import InvalidArgumentError

_WHERE = "load_dataset"
PLANETOID = ("cora", "citeseer", "pubmed")
NAMES = PLANETOID + ("ogbn-<name>", "edgelist", "synthetic", "products_like")


def _check_opts(fn, opts, name):
    params = inspect.signature(fn).parameters
    for key in opts:
        if key not in params or key in ("name", "root", "path"):
            raise InvalidArgumentError(_WHERE, key, opts[key], f"an option of {name!r}: "
                                       f"{sorted(k for k in params if k not in ('name', 'root', 'path'))}")


def load_csr_file(path: Union[str, Path], x_dim: int = 0, num_classes: int = 0, train_frac: float = 0.0,
                  seed: int = 0):
    """Loads a ``{rowptr, col, N}`` CSR file (e.g. from ``products_like.py``) as a ``Data``.

    Optionally adds random float32 features ``x`` (``x_dim`` columns), random labels ``y`` and a random
    ``train_mask`` covering ``train_frac`` of the nodes (benchmark stand-ins).
    """
    from torch_geometric.data import Data
    try:
        raw = torch.load(path, weights_only=True, mmap=True)
        rowptr, col, n = raw["rowptr"], raw["col"], int(raw["N"])
    except Exception as e:  # noqa: BLE001 - any failure to read is a bad argument
        raise InvalidArgumentError(_WHERE, "root", str(path), f"a readable {{rowptr, col, N}} file ({e})") from None
    edge_index = torch.empty(2, col.numel(), dtype=torch.long)
    edge_index[0].copy_(torch.repeat_interleave(torch.arange(n), torch.diff(rowptr)))
    edge_index[1].copy_(col)
    data = Data(edge_index=edge_index, num_nodes=n)
    gen = torch.Generator().manual_seed(seed)
    if x_dim:
        data.x = torch.randn(n, x_dim, generator=gen)
    if num_classes:
        data.y = torch.randint(0, num_classes, (n,), generator=gen)
    if train_frac:
        data.train_mask = torch.rand(n, generator=gen) < train_frac
    return data


def symmetrize(data):
    """Adds the reverse of every edge of ``data`` whose reverse is missing; per-edge attributes
    (``edge_attr``, ``edge_weight``, ``edge_time``, ...) of a reverse edge copy its forward edge's.

    Idempotent; duplicates and self loops of the input are kept as they are (never dropped).

    Example:
        >>> from torch_geometric.data import Data
        >>> d = symmetrize(Data(edge_index=torch.tensor([[0, 1, 2], [1, 0, 0]]), num_nodes=3))
        >>> d.edge_index.tolist()
        [[0, 1, 2, 0], [1, 0, 0, 2]]
    """
    missing = _missing_reverse(data.edge_index, data.num_nodes)
    if not bool(missing.any()):
        return data
    n_edges = data.edge_index.size(1)
    per_edge = [k for k in data.keys() if k != "edge_index" and data.is_edge_attr(k)
                and isinstance(data[k], torch.Tensor) and data[k].size(0) == n_edges]
    data.edge_index = torch.cat([data.edge_index, data.edge_index[:, missing].flip(0)], 1)
    for key in per_edge:
        data[key] = torch.cat([data[key], data[key][missing]])
    return data


def _missing_reverse(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Mask of the edges whose reverse edge is not in ``edge_index``."""
    n = max(int(num_nodes), 1)
    keys = edge_index[0] * n + edge_index[1]
    return ~torch.isin(edge_index[1] * n + edge_index[0], keys)


def edge_direction_report(data) -> str:
    """One line saying whether every edge of a homogeneous ``data`` has its reverse.

    Example:
        >>> from torch_geometric.data import Data
        >>> edge_direction_report(Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2))
        'edges: directed (1 of 1 edges lack their reverse; --undirected adds them)'
    """
    from torch_geometric.data import HeteroData
    if isinstance(data, HeteroData):
        return "edges: heterogeneous graph (per edge type, as loaded)"
    missing = int(_missing_reverse(data.edge_index, data.num_nodes).sum())
    if missing == 0:
        return "edges: symmetric (every edge has its reverse)"
    return (f"edges: directed ({missing} of {data.edge_index.size(1)} edges lack their reverse; "
            "--undirected adds them)")


def load_dataset(name: str, root: Optional[Union[str, Path]] = None, undirected: Optional[bool] = None,
                 **opts: Any):
    """Loads a graph by name (see the module docstring for the names and what ``root`` means).

    Args:
        name: Dataset name.
        root: Where the data lies (must be ``None`` for ``synthetic``).
        undirected: ``True``: add every missing reverse edge (:func:`symmetrize`); ``False``: keep the
            edges as stored; ``None``: the dataset's convention (see the module docstring).
        **opts: Loader options (e.g. ``num_nodes=10_000, hetero=True`` for ``synthetic``).

    Raises:
        InvalidArgumentError: unknown name, unknown option, or missing / unreadable input.

    Example:
        >>> data = load_dataset("synthetic", num_nodes=500, avg_degree=6)
        >>> data.num_nodes
        500
    """
    if undirected is not None and not isinstance(undirected, bool):
        raise InvalidArgumentError(_WHERE, "undirected", undirected, "None, True or False")
    data = _load(str(name).lower(), name, root, undirected, opts)
    if undirected:
        from torch_geometric.data import HeteroData
        if isinstance(data, HeteroData):
            raise InvalidArgumentError(_WHERE, "undirected", True, "None for heterogeneous graphs")
        data = symmetrize(data)
    return data


def _load(key: str, name: str, root, undirected: Optional[bool], opts: dict):
    if key == "synthetic" and root is not None:
        raise InvalidArgumentError(_WHERE, "root", str(root), "None for 'synthetic' (the graph is generated)")
    if key == "synthetic" and undirected is False:
        raise InvalidArgumentError(_WHERE, "undirected", False, "None or True for 'synthetic' (always symmetric)")
    if key in PLANETOID:
        from pyg_dist.datasets.planetoid import load_planetoid
        _check_opts(load_planetoid, opts, key)
        return load_planetoid(key, root)
    if key.startswith("ogbn-"):
        from pyg_dist.datasets.ogb import load_ogb_node
        _check_opts(load_ogb_node, opts, key)
        if undirected is not None:
            opts = dict(opts, add_inverse_edge=undirected)
        return load_ogb_node(key, _need_root(root, key), **opts)
    if key == "edgelist":
        from pyg_dist.datasets.edgelist import load_edgelist
        _check_opts(load_edgelist, opts, key)
        return load_edgelist(_need_root(root, key), **opts)
    if key == "synthetic":
        from pyg_dist.datasets.synthetic import synthetic_graph
        _check_opts(synthetic_graph, opts, key)
        return synthetic_graph(**opts)
    if key == "products_like":
        _check_opts(load_csr_file, opts, key)
        return load_csr_file(_need_root(root, key), **opts)
    raise InvalidArgumentError(_WHERE, "name", name, f"one of {list(NAMES)}")


def _need_root(root, name) -> Path:
    if root is None or not Path(root).exists():
        raise InvalidArgumentError(_WHERE, "root", root, f"an existing path holding the {name!r} data")
    return Path(root)
