"""Multi-constraint METIS through ctypes, on the 64-bit METIS bundled with pymetis.

``pymetis.part_graph`` hard-codes one balance constraint and silently reads only the first N vertex
weights. The same shared object exports ``METIS_PartGraphKway``, which takes ``ncon`` weights per
vertex; :func:`metis_kway` calls it directly. Imbalance is set with METIS' integer ``ufactor`` option
(``1 + ufactor / 1000`` per constraint), so no ``real_t`` array crosses the boundary.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from pyg_dist.errors import PyGDistError

_NOPTIONS = 40
_METIS_OK = 1
_ERRORS = {-2: "METIS_ERROR_INPUT", -3: "METIS_ERROR_MEMORY", -4: "METIS_ERROR"}


@functools.lru_cache(maxsize=1)
def _library():
    import pymetis._internal as internal
    from pymetis._internal import _idx_type_width, options_indices
    if _idx_type_width() != 64:
        raise PyGDistError(f"pymetis' bundled METIS uses {_idx_type_width()}-bit indices; pyg_dist needs 64")
    lib = ctypes.CDLL(internal.__file__)
    p = ctypes.POINTER(ctypes.c_int64)
    for fn in (lib.METIS_PartGraphKway, lib.METIS_PartGraphRecursive):  # same C signature
        fn.argtypes = [p, p, p, p, p, p, p, p, ctypes.c_void_p, ctypes.c_void_p, p, p, p]
        fn.restype = ctypes.c_int
    lib.METIS_SetDefaultOptions.argtypes = [p]
    lib.METIS_SetDefaultOptions.restype = ctypes.c_int
    return lib, options_indices


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))


def metis_kway(xadj: np.ndarray, adjncy: np.ndarray, num_parts: int, vwgt: Optional[np.ndarray] = None,
               seed: int = 0, ufactor: int = 30, recursive: bool = False,
               adjwgt: Optional[np.ndarray] = None) -> Tuple[Tensor, int]:
    """Partitions a symmetric CSR graph into ``num_parts`` with several balance constraints.

    Args:
        xadj: ``[N + 1]`` int64 row pointer of a symmetric graph without self loops or duplicates.
        adjncy: ``[xadj[-1]]`` int64 neighbours.
        num_parts: Number of parts (>= 1).
        vwgt: Optional ``[N, ncon]`` int64 vertex weights; every column must have a positive sum.
        seed: METIS' random seed (the result is deterministic for a given seed).
        ufactor: Allowed imbalance in thousandths per constraint (30 = 3 %).
        recursive: Multilevel recursive bisection (``METIS_PartGraphRecursive``) instead of k-way.
        adjwgt: Optional ``[xadj[-1]]`` positive int64 edge weights (symmetric), e.g. of a coarsened graph.

    Returns:
        ``(part, edgecut)``: an int64 tensor ``[N]`` with the part of each vertex and METIS' cut.

    Example:
        >>> xadj = np.array([0, 1, 2, 3, 4]); adj = np.array([1, 0, 3, 2])
        >>> metis_kway(xadj, adj, 2)[0].tolist() in ([0, 0, 1, 1], [1, 1, 0, 0])
        True
    """
    n = len(xadj) - 1
    if num_parts == 1 or n == 0:
        return torch.zeros(n, dtype=torch.long), 0
    lib, opt = _library()
    xadj = np.ascontiguousarray(xadj, dtype=np.int64)
    adjncy = np.ascontiguousarray(adjncy, dtype=np.int64)
    if len(adjncy) == 0:
        adjncy = np.zeros(1, dtype=np.int64)  # METIS reads adjncy[0]; never a real neighbour here
    ncon = 1
    if vwgt is not None:
        vwgt = np.ascontiguousarray(vwgt, dtype=np.int64).reshape(n, -1)
        ncon = vwgt.shape[1]
        if (vwgt.sum(0) <= 0).any():
            raise PyGDistError(f"metis_kway: a balance constraint has no positive weight: {vwgt.sum(0)}")
    if adjwgt is not None:
        adjwgt = np.ascontiguousarray(adjwgt, dtype=np.int64)
        if len(adjwgt) == 0:
            adjwgt = np.ones(1, dtype=np.int64)
    options = np.zeros(_NOPTIONS, dtype=np.int64)
    lib.METIS_SetDefaultOptions(_ptr(options))
    options[opt.SEED], options[opt.UFACTOR], options[opt.NUMBERING] = seed, ufactor, 0
    part = np.zeros(n, dtype=np.int64)
    nv, nc, npart, cut = (np.array([v], dtype=np.int64) for v in (n, ncon, num_parts, 0))
    fn = lib.METIS_PartGraphRecursive if recursive else lib.METIS_PartGraphKway
    status = fn(
        _ptr(nv), _ptr(nc), _ptr(xadj), _ptr(adjncy), _ptr(vwgt) if vwgt is not None else None,
        None, _ptr(adjwgt) if adjwgt is not None else None, _ptr(npart), None, None, _ptr(options), _ptr(cut),
        _ptr(part))
    if status != _METIS_OK:
        kind = "Recursive" if recursive else "Kway"
        raise PyGDistError(f"METIS_PartGraph{kind} failed with {_ERRORS.get(status, status)} "
                           f"(N={n}, edges={int(xadj[-1])}, ncon={ncon}, parts={num_parts})")
    return torch.from_numpy(part), int(cut[0])
