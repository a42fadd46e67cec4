"""One entry point for every graph source: ``load_dataset(name, root, **opts)``.

Names: ``cora`` / ``citeseer`` / ``pubmed`` (Planetoid raw files), ``ogbn-*`` (an unpacked OGB
node-property folder), ``edgelist`` (``root`` = edge file or folder), ``synthetic`` (the built-in
generator; ``opts`` are :func:`~pyg_dist.datasets.synthetic.synthetic_graph` arguments), ``products_like``
(the reference benchmark graph of :mod:`pyg_dist.datasets.products_like`, generated on first use and cached per
user; option ``num_nodes``: a smaller graph of that shape; or ``root`` = an existing ``{rowptr, col, N}`` file)
and ``pyg`` (``root`` = a ``Data`` / ``HeteroData`` saved with ``torch.save``, or an ``InMemoryDataset``'s
processed file of one graph; :func:`~pyg_dist.datasets.pyg_file.load_pyg_file`).

Every reader takes ``undirected``: ``True`` adds the reverse of every edge whose reverse is missing
(:func:`~pyg_dist.datasets.direction.symmetrize`; idempotent, so an already symmetric graph is unchanged and no
edge is ever dropped), ``False`` keeps the edges as stored, ``None`` (default) follows the dataset's convention
(OGB's table of datasets stored one direction per line; as stored otherwise).
:func:`~pyg_dist.datasets.direction.edge_direction_report` says which the loaded graph is.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Optional, Union

import torch

from pyg_dist.datasets.direction import symmetrize
from pyg_dist.errors import InvalidArgumentError, check_positive_int

_WHERE = "load_dataset"
PLANETOID = ("cora", "citeseer", "pubmed")
NAMES = PLANETOID + ("ogbn-<name>", "edgelist", "synthetic", "products_like", "pyg")


def _check_opts(fn, opts, name):
    params = inspect.signature(fn).parameters
    for key in opts:
        if key not in params or key in ("name", "root", "path"):
            raise InvalidArgumentError(_WHERE, key, opts[key], f"an option of {name!r}: "
                                       f"{sorted(k for k in params if k not in ('name', 'root', 'path'))}")


def load_csr_file(path: Union[str, Path], x_dim: int = 0, num_classes: int = 0, train_frac: float = 0.0,
                  seed: int = 0):
    """Loads a ``{rowptr, col, N}`` CSR file (e.g. from :mod:`pyg_dist.datasets.products_like`) as a ``Data``.

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
        return _products_like(root, dict(opts))
    if key == "pyg":
        from pyg_dist.datasets.pyg_file import load_pyg_file
        _check_opts(load_pyg_file, opts, key)
        return load_pyg_file(_need_root(root, key), **opts)
    raise InvalidArgumentError(_WHERE, "name", name, f"one of {list(NAMES)}")


def _products_like(root, opts: dict):
    """``products_like``: ``root`` (a ``{rowptr, col, N}`` file), else the generated graph with ``num_nodes``
    nodes (default ogbn-products' count; the drawn pairs in proportion), cached per user."""
    from pyg_dist.datasets import products_like as pl
    num_nodes = opts.pop("num_nodes", None)
    _check_opts(load_csr_file, opts, "products_like")
    if root is not None:
        if num_nodes is not None:
            raise InvalidArgumentError(_WHERE, "num_nodes", num_nodes, "not given with a 'products_like' root "
                                       "(the file fixes the graph)")
        return load_csr_file(_need_root(root, "products_like"), **opts)
    n = pl.PRODUCTS_NODES if num_nodes is None else check_positive_int(_WHERE, "num_nodes", num_nodes)
    pairs = pl.PRODUCTS_PAIRS if n == pl.PRODUCTS_NODES else round(pl.PRODUCTS_PAIRS * n / pl.PRODUCTS_NODES)
    return load_csr_file(pl.products_like_file(n, pairs), **opts)


def _need_root(root, name) -> Path:
    if root is None or not Path(root).exists():
        raise InvalidArgumentError(_WHERE, "root", root, f"an existing path holding the {name!r} data")
    return Path(root)
