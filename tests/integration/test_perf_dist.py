"""scripts/perf_dist.py: the perf report is split into categories as documented (the profile itself needs
Linux perf and a benchmark graph, so it runs by hand: see docs/benchmarks.md)."""
from pathlib import Path

import pytest

from pyg_dist.testing import load_script

REPO = Path(__file__).resolve().parents[2]

REPORT = """# Samples: 1K of event 'cpu-clock'
#
    40.00%  python          [JIT] tid 11520         [.] numba:_numba_rows.copy_rows
    20.00%  pt_thread_pool  [JIT] tid 11520         [.] numba:_numba_sample.sample_kernel_serial
     8.00%  TP_CMA_loop     [kernel.kallsyms]       [k] _copy_to_iter
     6.00%  python          libpython3.11.so.1.0    [.] _PyEval_EvalFrameDefault
     6.00%  python          [JIT] tid 11520         [.] numba:_numba_book.split_by_range
     5.00%  python          libtorch_cpu.so         [.] at::native::(anonymous namespace)::min_all_kernel_impl
     5.00%  python          [JIT] tid 11520         [.] 0x00007f75a09f9059
    10.00%  swapper         [kernel.kallsyms]       [k] pv_native_safe_halt
"""


def test_perf_report_shares_by_category():
    perf_dist = load_script(REPO / "scripts" / "perf_dist.py")
    got = perf_dist.shares(REPORT)
    assert got == pytest.approx({"row gathers": 40 / 90, "sampling kernels": 20 / 90,
                                 "kernel (copies, scheduling, faults)": 8 / 90, "Python (messages, asyncio)": 6 / 90,
                                 "routing kernels": 6 / 90, "libtorch / numpy / libc rest": 5 / 90,
                                 "other JIT": 5 / 90})
