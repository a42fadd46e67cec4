"""The generator's graph written chunk by chunk to disk, for graphs larger than memory.

:func:`write_dcsbm_chunks` draws the same degree-corrected SBM as
:func:`~pyg_dist.datasets.synthetic.dcsbm_edges` (Chung-Lu power-law weights, communities of
``community_size`` consecutive ids, ``intra_frac`` of the pairs inside the source's community), but never
holds more than one chunk of pairs: every pair is written in both directions to ``edges/<i>.npy``
(``[2, e]``, int32 below 2**31 nodes), self loops dropped, duplicates kept (removing them needs the whole
list). Node ids are shuffled by a seeded permutation, so no method profits from community-ordered ids.
Optional ``y`` (the community modulo ``num_classes``), ``x`` (a noisy one-hot of ``y``) and ``train_mask``
are written as ``.npy`` files node chunk by node chunk. The folder opens with
:func:`pyg_dist.partition.ooc.chunked.open_chunked`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Union

import numpy as np
import torch
from tqdm.auto import tqdm

from pyg_dist.datasets.synthetic import _draw
from pyg_dist.errors import InvalidArgumentError, check_positive_int

_WHERE = "write_dcsbm_chunks"


def write_dcsbm_chunks(folder: Union[str, Path], num_nodes: int, num_pairs: int, *, chunk_pairs: int = 1 << 24,
                       community_size: int = 1200, intra_frac: float = 0.85, power: float = 0.5, x_dim: int = 0,
                       num_classes: int = 0, train_frac: float = 0.0, seed: int = 0, progress: bool = True) -> int:
    """Writes a graph of ``num_nodes`` nodes and about ``2 * num_pairs`` directed edges into ``folder``.

    Returns:
        The number of directed edges written.
    """
    check_positive_int(_WHERE, "num_nodes", num_nodes)
    check_positive_int(_WHERE, "num_pairs", num_pairs)
    check_positive_int(_WHERE, "chunk_pairs", chunk_pairs)
    if not 0.0 <= intra_frac <= 1.0:
        raise InvalidArgumentError(_WHERE, "intra_frac", intra_frac, "a fraction in [0, 1]")
    folder = Path(folder)
    (folder / "edges").mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    # its own stream: a permutation drawn first from seed s would equal random_assign(seed=s)'s own
    relabel = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(seed + 0x5EED))
    weight = (torch.randperm(num_nodes, generator=gen).double() + 1.0).pow(-power)
    cdf = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(weight, 0)])
    del weight
    total, dtype, written = cdf[-1].item(), np.int32 if num_nodes < 2 ** 31 else np.int64, 0
    with tqdm(total=num_pairs, desc="generating pairs", unit_scale=True, disable=not progress) as bar:
        for i, start in enumerate(range(0, num_pairs, chunk_pairs)):
            m = min(chunk_pairs, num_pairs - start)
            zeros = torch.zeros(m, dtype=torch.float64)
            src = _draw(cdf, zeros, zeros + total, gen)
            comm = src // community_size
            intra = torch.rand(m, generator=gen) < intra_frac
            lo = torch.where(intra, cdf[comm * community_size], zeros)
            hi = torch.where(intra, cdf[torch.clamp((comm + 1) * community_size, max=num_nodes)], zeros + total)
            dst = _draw(cdf, lo, hi, gen)
            keep = src != dst
            src, dst = relabel[src[keep]], relabel[dst[keep]]
            pairs = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])]).numpy().astype(dtype)
            np.save(folder / "edges" / f"{i:05d}.npy", pairs)
            written += pairs.shape[1]
            bar.update(m)
    _node_files(folder, num_nodes, relabel, community_size, x_dim, num_classes, train_frac, gen)
    return written


def _node_files(folder: Path, n: int, relabel: torch.Tensor, community_size: int, x_dim: int, num_classes: int,
                train_frac: float, gen: torch.Generator, chunk: int = 1 << 22) -> None:
    """``y``, ``x`` and ``train_mask`` in the shuffled id order, chunk by chunk of nodes."""
    if not num_classes:
        return
    original = torch.empty_like(relabel)
    original[relabel] = torch.arange(n)  # new id -> generator id (its community)
    y = np.lib.format.open_memmap(folder / "y.npy", mode="w+", dtype=np.int64, shape=(n,))
    x = (np.lib.format.open_memmap(folder / "x.npy", mode="w+", dtype=np.float32, shape=(n, x_dim))
         if x_dim else None)
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        label = (original[lo:hi] // community_size) % num_classes
        y[lo:hi] = label.numpy()
        if x is not None:
            feat = torch.randn(hi - lo, x_dim, generator=gen)
            feat[torch.arange(hi - lo), label % x_dim] += 2.0
            x[lo:hi] = feat.numpy()
    y.flush()
    if x is not None:
        x.flush()
    if train_frac:
        np.save(folder / "train_mask.npy", (torch.rand(n, generator=gen) < train_frac).numpy())
