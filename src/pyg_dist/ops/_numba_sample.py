"""Numba one-hop sampling kernels (CPU). Do not call directly: go through :mod:`pyg_dist.ops.backend`.

Two parallel passes over the frontier (``prange`` over seeds): :func:`count_kernel` gives each seed's
number of samples (a prefix sum turns them into the output ``colptr``), :func:`sample_kernel` writes
each seed's sampled neighbour ids, edge ids and the seed's local index straight into that CSC slot.

Randomness: every seed draws from its own splitmix64 stream keyed by ``(key, global seed id, subgraph)``
(the subgraph only when disjoint), so a seed's sample depends on ``key`` and the seed alone: never on
the thread count, on the seed's position in the frontier, or on which partition samples it.
The stream is a counter (draw ``j`` comes from state ``s0 + (j + 1) * golden``), so a sample with
replacement can start at any draw (``skip``).

Modes (ints, so one compiled kernel serves all): ``tmode`` 0 = no time, 1 = node time of the
neighbour, 2 = edge time; ``last`` = temporal strategy 'last' (the ``k`` most recent allowed).
Missing optional arrays are passed as empty arrays.
"""
from __future__ import annotations

import types as pytypes

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0
_FLOYD_MAX = 64


@intrinsic
def _prefetch(typingctx, arr, idx):
    """LLVM ``prefetch`` of ``arr[idx]`` (a hint: never faults, even out of bounds)."""
    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = builder.module.declare_intrinsic("llvm.prefetch", fnty=fnty)
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), i8p)
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.void(arr, idx), codegen


_AHEAD = 8
#: Cache lines of a seed's neighbour list prefetched ahead (a degree-64 list is 8 lines of int64 ids).
_LIST_LINES = 8


@njit(cache=True, nogil=True)
def _next(state):
    """splitmix64: returns (new state, uniform float in [0, 1))."""
    state = state + _GOLDEN
    z = state
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    z = z ^ (z >> _S31)
    return state, float(z >> _S11) * _INV53


@njit(cache=True, nogil=True)
def _mix(z):
    """splitmix64's finaliser: a bijective scramble of 64 bits."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(cache=True, nogil=True)
def _stream(key, gid, sub):
    """The first state of the stream of global seed ``gid`` in subgraph ``sub`` (-1: not disjoint)."""
    z = _mix(np.uint64(gid) * _GOLDEN + np.uint64(sub + 1) * _M1)
    return np.uint64(key) ^ z


@njit(cache=True, nogil=True)
def _below(state, n):
    state, u = _next(state)
    v = np.int64(u * n)
    return state, (v if v < n else n - 1)


@njit(cache=True, nogil=True)
def _allowed(p, row, has_w, weight, tmode, node_time, edge_time, t):
    if has_w and not weight[p] > 0.0:
        return False
    if tmode == 1:
        return node_time[row[p]] <= t
    if tmode == 2:
        return edge_time[p] <= t
    return True


@njit(cache=True, nogil=True)
def _take(n, k, replace):
    if n == 0:
        return 0
    if k < 0:
        return n
    if replace:
        return k
    return k if k < n else n


@njit(cache=True, nogil=True, parallel=True)
def count_kernel(colptr, row, seeds, k, replace, has_w, weight, tmode, node_time, edge_time,
                 seed_time, start, deg):
    """Number of neighbours each seed will sample (``seeds`` are local indices into ``colptr``).

    Also stores each seed's first in-edge position and degree in ``start`` / ``deg`` so that the
    sample pass reads them sequentially instead of hitting ``colptr`` at random again.
    """
    m = seeds.shape[0]
    counts = np.empty(m, np.int64)
    for i in prange(m):
        if i + _AHEAD < m:
            _prefetch(colptr, seeds[i + _AHEAD])
        d = seeds[i]
        c0, c1 = colptr[d], colptr[d + 1]
        start[i] = c0
        deg[i] = c1 - c0
        if tmode == 0 and not has_w:
            n = c1 - c0
        else:
            t = seed_time[i] if tmode != 0 else 0
            n = 0
            for p in range(c0, c1):
                if _allowed(p, row, has_w, weight, tmode, node_time, edge_time, t):
                    n += 1
        counts[i] = _take(n, k, replace)
    return counts


@njit(cache=True, nogil=True)
def _choose_uniform(n, cnt, replace, state, out, o):
    """Writes ``cnt`` indices in ``[0, n)`` into ``out[o:o + cnt]`` (distinct unless ``replace``)."""
    if replace:
        for j in range(cnt):
            state, out[o + j] = _below(state, n)
    elif cnt == n:
        for j in range(cnt):
            out[o + j] = j
    elif cnt <= _FLOYD_MAX:  # Floyd: cnt draws, O(cnt^2) membership checks on a tiny slice
        filled = 0
        for j in range(n - cnt, n):
            state, r = _below(state, j + 1)
            for q in range(filled):
                if out[o + q] == r:
                    r = j
                    break
            out[o + filled] = r
            filled += 1
    else:  # selection sampling (Knuth's algorithm S): one pass, no scratch
        need = cnt
        filled = 0
        for j in range(n):
            state, u = _next(state)
            if u * (n - j) < need:
                out[o + filled] = j
                filled += 1
                need -= 1
                if need == 0:
                    break
    return state


@njit(cache=True, nogil=True)
def _choose_weighted(w, cnt, replace, state, out, o):
    """Weighted choice of ``cnt`` indices into ``w`` (all positive): A-Res keys, or inverse CDF."""
    n = w.shape[0]
    if replace:
        cdf = np.cumsum(w)
        total = cdf[n - 1]
        for j in range(cnt):
            state, u = _next(state)
            v = np.searchsorted(cdf, u * total, side="right")
            out[o + j] = v if v < n else n - 1
    elif cnt == n:
        for j in range(cnt):
            out[o + j] = j
    else:
        keys = np.empty(n, np.float64)
        for j in range(n):
            state, u = _next(state)
            keys[j] = -np.log(1.0 - u) / w[j]  # exponential race: smallest keys win
        order = np.argsort(keys)
        for j in range(cnt):
            out[o + j] = order[j]
    return state


@njit(cache=True, nogil=True)
def _choose_among(cand, n, cnt, replace, last, has_w, weight, tmode, row, node_time, edge_time,
                  seed_time, state, out, o):
    """Chooses ``cnt`` of the ``n`` allowed positions ``cand[:n]``; writes POSITIONS to ``out``."""
    if last:
        times = np.empty(n, seed_time.dtype)
        for j in range(n):
            p = cand[j]
            times[j] = node_time[row[p]] if tmode == 1 else edge_time[p]
        order = np.argsort(times, kind="mergesort")
        for j in range(cnt):
            out[o + j] = cand[order[n - 1 - j]]
        return state
    if has_w:
        w = np.empty(n, np.float64)
        for j in range(n):
            w[j] = weight[cand[j]]
        state = _choose_weighted(w, cnt, replace, state, out, o)
    else:
        state = _choose_uniform(n, cnt, replace, state, out, o)
    for j in range(cnt):
        out[o + j] = cand[out[o + j]]
    return state


@njit(cache=True, nogil=True, parallel=True)
def sample_kernel(start, deg, row, has_eid, edge_id, eid_offset, col_offset, offsets, replace, last, has_w,
                  weight, tmode, node_time, edge_time, seed_time, key, seeds, id_offset, sub, out_nbr,
                  out_eid, out_col, skip):
    """Fills ``out_*[offsets[i]:offsets[i + 1]]`` with seed ``i``'s sample: neighbour ids, edge ids
    (``edge_id[p]``, or ``p + eid_offset`` without them), and the seed's local index ``col_offset + i``.
    Seed ``i``'s draws come from the stream of its global id ``seeds[i] + id_offset`` (and subgraph ``sub[i]``
    when ``sub`` is not empty), from its draw ``skip`` on: with replacement every sample is one draw and the
    stream a counter, so draws ``skip, skip + 1, ...`` are the samples ``skip, skip + 1, ...`` of a whole
    sample (a large one sampled in pieces of draws equals the whole)."""
    m = start.shape[0]
    for i in prange(m):
        if i + _AHEAD < m:
            a = start[i + _AHEAD]
            e = a + min(deg[i + _AHEAD], _LIST_LINES * 8)  # a short list's every line (8 ids per line)
            for q in range(a, max(e, a + 1), 8):
                _prefetch(row, q)
                if has_eid:
                    _prefetch(edge_id, q)
        o = offsets[i]
        cnt = offsets[i + 1] - o
        if cnt == 0:
            continue
        c0 = start[i]
        state = _stream(key, seeds[i] + id_offset, sub[i] if sub.shape[0] else -1) + np.uint64(skip) * _GOLDEN
        if tmode == 0 and not has_w:
            state = _choose_uniform(deg[i], cnt, replace, state, out_eid, o)
            for j in range(cnt):
                out_eid[o + j] += c0
        else:
            t = seed_time[i] if tmode != 0 else 0
            cand = np.empty(deg[i], np.int64)
            n = 0
            for p in range(c0, c0 + deg[i]):
                if _allowed(p, row, has_w, weight, tmode, node_time, edge_time, t):
                    cand[n] = p
                    n += 1
            state = _choose_among(cand, n, cnt, replace, last, has_w, weight, tmode, row, node_time,
                                  edge_time, seed_time, state, out_eid, o)
        loc = col_offset + i
        for j in range(cnt):
            p = out_eid[o + j]
            out_nbr[o + j] = row[p]
            out_eid[o + j] = edge_id[p] if has_eid else p + eid_offset
            out_col[o + j] = loc


def _serial_twin(kernel):
    """``kernel`` compiled without ``parallel`` (``prange`` runs as ``range``).

    A serial build never enters numba's threading layer, so it needs no kernel lock and several Python
    threads may run it at once (a trainer's loop sampling while RPC threads serve its peers). It gets
    its own qualname so numba's on-disk cache keeps its entries apart from the parallel build's.
    """
    f = kernel.py_func
    name = f.__name__ + "_serial"
    changes = {"co_name": name}
    if hasattr(f.__code__, "co_qualname"):
        changes["co_qualname"] = f.__qualname__ + "_serial"
    twin = pytypes.FunctionType(f.__code__.replace(**changes), f.__globals__, name, f.__defaults__, f.__closure__)
    twin.__qualname__ = f.__qualname__ + "_serial"
    return njit(cache=True, nogil=True)(twin)


count_kernel_serial = _serial_twin(count_kernel)
sample_kernel_serial = _serial_twin(sample_kernel)
