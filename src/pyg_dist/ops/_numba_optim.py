"""Numba sparse optimizer steps: each touched row read and written once (sequential, GIL released)."""
from __future__ import annotations

import math

from numba import njit


@njit(cache=True, nogil=True)
def adam_rows(param, exp_avg, exp_avg_sq, step, rows, grad, grad_rows, lr, beta1, beta2, eps):
    """``torch.optim.SparseAdam``'s update of ``param[rows[i]]`` by ``grad[grad_rows[i]]`` (``grad_rows``
    empty: ``grad[i]``), per-row step counts."""
    d = param.shape[1]
    direct = grad_rows.shape[0] == 0
    for i in range(rows.shape[0]):
        r = rows[i]
        j = i if direct else grad_rows[i]
        s = step[r] + 1
        step[r] = s
        size = lr * math.sqrt(1.0 - beta2 ** s) / (1.0 - beta1 ** s)
        for k in range(d):
            g = grad[j, k]
            m = exp_avg[r, k] + (g - exp_avg[r, k]) * (1.0 - beta1)
            v = exp_avg_sq[r, k] + (g * g - exp_avg_sq[r, k]) * (1.0 - beta2)
            exp_avg[r, k] = m
            exp_avg_sq[r, k] = v
            param[r, k] -= size * m / (math.sqrt(v) + eps)


@njit(cache=True, nogil=True)
def adagrad_rows(param, state_sum, rows, grad, grad_rows, lr, eps):
    """``torch.optim.Adagrad``'s sparse update of ``param[rows[i]]`` by ``grad[grad_rows[i]]`` (``grad_rows``
    empty: ``grad[i]``; no lr decay)."""
    d = param.shape[1]
    direct = grad_rows.shape[0] == 0
    for i in range(rows.shape[0]):
        r = rows[i]
        j = i if direct else grad_rows[i]
        for k in range(d):
            g = grad[j, k]
            s = state_sum[r, k] + g * g
            state_sum[r, k] = s
            param[r, k] -= lr * g / (math.sqrt(s) + eps)
