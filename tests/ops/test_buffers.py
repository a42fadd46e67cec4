"""Batch memory: the output buffer pool, one-pass row copies, owner splits, chunked lookup replies."""
import os
import subprocess
import sys

import pytest
import torch

from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.format.book import DensePartitionBook, PartitionBook, _BookBase
from pyg_dist.ops import rows as row_ops
from pyg_dist.ops.rows import copy_rows, take_rows
from pyg_dist.store import buffers, lookup, serving

pytestmark = pytest.mark.timeout(120)
ROWS = buffers._MIN_BYTES // 400 + 10  # a float32 [ROWS, 100] tensor is above the pool's floor
UNIT = ROWS * 400


def _use_backend(monkeypatch, numba: bool) -> None:
    """numba=True: the numba kernels (skipped where numba is not installed); False: the torch path."""
    if numba and not row_ops.numba_available():
        pytest.skip("numba is not installed")
    if not numba:
        monkeypatch.setattr(row_ops, "numba_available", lambda: False)


@pytest.fixture
def pool():
    return buffers.BufferPool(16 * UNIT)


def test_pool_reuses_a_storage_only_when_nothing_else_holds_it(pool):
    a = pool.empty((ROWS, 100), torch.float32)
    ptr = a.data_ptr()
    b = pool.empty((ROWS, 100), torch.float32)  # a is held: a second storage
    assert b.data_ptr() != ptr
    view = a[:3]
    del a
    c = pool.empty((ROWS, 100), torch.float32)  # a's view still holds its storage
    assert c.data_ptr() not in (ptr, b.data_ptr())
    b.fill_(2.0)
    c.fill_(3.0)
    del view
    d = pool.empty((ROWS - 5, 100), torch.float32)
    assert d.data_ptr() == ptr and d.shape == (ROWS - 5, 100)
    d.fill_(1.0)
    assert bool((b == 2.0).all()) and bool((c == 3.0).all())  # held tensors never change


def test_pool_never_reuses_memory_moved_to_shared_memory(pool):
    a = pool.empty((ROWS, 100), torch.float32)
    a.share_memory_()  # what a DataLoader worker does before sending the batch (moves the storage)
    del a  # only the pool holds it now: without the shared-memory rule it would be handed out again
    b = pool.empty((ROWS, 100), torch.float32)
    assert not b.untyped_storage().is_shared()
    assert all(not s.is_shared() for s in pool._storages)


def test_pool_respects_its_limit_small_requests_and_off_switch():
    pool = buffers.BufferPool(6 * UNIT)  # room for one buffer of 4 units (plus head room), not two
    a = pool.empty((ROWS * 4, 100), torch.float32)
    b = pool.empty((ROWS * 4, 100), torch.float32)
    assert len(pool._storages) == 1 and pool.pooled_bytes <= 6 * UNIT
    assert a.shape == b.shape == (ROWS * 4, 100)
    assert pool.empty((10, 3), torch.float32).shape == (10, 3) and len(pool._storages) == 1
    off = buffers.BufferPool(0)
    assert off.empty((ROWS, 100), torch.float32).shape == (ROWS, 100) and not off._storages


def test_pool_does_not_hand_out_storages_twice_the_request(pool):
    big = pool.empty((ROWS * 8, 100), torch.float32)
    ptr = big.data_ptr()
    del big
    small = pool.empty((ROWS, 100), torch.float32)  # torch.rpc would copy a tensor on a 8x storage
    assert small.data_ptr() != ptr


def _maps() -> set:
    """The (start, end) address ranges of this process's memory maps."""
    with open("/proc/self/maps") as fh:
        return {tuple(int(a, 16) for a in line.split()[0].split("-")) for line in fh}


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps (Linux)")
def test_pool_memory_lives_in_maps_of_its_own_and_overflow_is_unmapped():
    """Below glibc's 32 MiB mmap threshold a freed block would stay in the one heap (split by other threads'
    small allocations): the pool's storages and what it hands out over its limit are maps of their own."""
    small = buffers.BufferPool(3 << 20, min_bytes=256 << 10)
    kept = small.empty((1 << 18,), torch.float32)  # 1 MiB: a pooled storage
    over = small.empty((1 << 18,), torch.float32)  # the pool holds 1.1 MiB of 3: a second one
    extra = small.empty((1 << 18,), torch.float32)  # over the limit: a map that goes when dropped
    for t in (kept, over, extra):
        t.fill_(7.0)
        assert torch.equal(t, torch.full((1 << 18,), 7.0))
        assert any(lo <= t.data_ptr() and t.data_ptr() + t.nbytes <= hi and hi - lo < (2 << 20)
                   for lo, hi in _maps()), "not on a map of its own"
    assert len(small._storages) == 2 and small.misses == 3
    where = extra.data_ptr()
    del extra, t
    assert not any(lo <= where < hi for lo, hi in _maps())  # unmapped: nothing stays in the heap
    del kept
    again = small.empty((1 << 18,), torch.float32)
    assert small.hits == 1 and again.data_ptr() in {s.data_ptr() for s in small._storages}


def test_gather_rows_equals_index_select():
    x = torch.randn(3 * ROWS, 100)
    idx = torch.randint(0, x.size(0), (ROWS,))
    assert torch.equal(buffers.gather_rows(x, idx), x.index_select(0, idx))
    assert torch.equal(buffers.gather_rows(x, idx[:7]), x[idx[:7]])


def test_set_buffer_pool_limit_checks_its_argument():
    with pytest.raises(InvalidArgumentError, match="limit_mb"):
        buffers.set_buffer_pool_limit(-1)
    with pytest.raises(InvalidArgumentError, match="limit_mb"):
        buffers.set_buffer_pool_limit("big")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool, torch.float16,
                                   torch.uint8, torch.int32])
@pytest.mark.parametrize("shape", [(40,), (40, 3), (40, 7, 2), (40, 100)])
def test_copy_rows_equals_indexing(dtype, shape):
    gen = torch.Generator().manual_seed(0)
    src = (torch.rand(shape, generator=gen) * 100).to(dtype)
    out = torch.zeros((70,) + shape[1:], dtype=dtype)
    pos, rows = torch.randperm(70, generator=gen)[:25], torch.randint(0, 40, (25,), generator=gen)
    want = out.clone()
    want[pos] = src[rows]
    copy_rows(out, pos, src, rows)
    assert torch.equal(out, want)
    direct = torch.zeros_like(out)
    want = direct.clone()
    want[pos] = src[10:35]
    copy_rows(direct, pos, src[10:35])  # a source with a storage offset
    assert torch.equal(direct, want)


@pytest.mark.parametrize("numba", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
@pytest.mark.parametrize("shape", [(40,), (40, 3), (40, 100)])
def test_take_rows_equals_index_select(monkeypatch, numba, dtype, shape):
    _use_backend(monkeypatch, numba)
    gen = torch.Generator().manual_seed(1)
    src = (torch.rand(shape, generator=gen) * 100).to(dtype)
    for base, idx_dtype in ((src, torch.int64), (src[5:30], torch.int32)):  # a source with a storage offset
        rows = torch.randint(0, base.size(0), (60,), generator=gen).to(idx_dtype)
        out = torch.full((60,) + shape[1:], 7).to(dtype)
        assert take_rows(base, rows, out) is out
        assert torch.equal(out, base.index_select(0, rows))


@pytest.mark.parametrize("numba", [True, False])
@pytest.mark.parametrize("bad", [-1, 40, 1 << 40])
def test_take_rows_rejects_rows_outside_src(monkeypatch, numba, bad):
    _use_backend(monkeypatch, numba)
    rows = torch.tensor([3, 0, bad, 5])
    with pytest.raises(IndexError, match=r"rows\[2\] = " + str(bad) if numba else "out of range"):
        take_rows(torch.ones(40, 4), rows, torch.empty(4, 4))
    with pytest.raises(IndexError):  # gather_rows takes the same path from 256 KiB up
        buffers.gather_rows(torch.ones(40, 100), torch.tensor([1] * 2000 + [bad]))


def test_take_rows_checks_out():
    with pytest.raises(InvalidArgumentError, match="out"):
        take_rows(torch.ones(5, 3), torch.tensor([0, 1]), torch.empty(3, 3))
    with pytest.raises(InvalidArgumentError, match="out"):
        take_rows(torch.ones(5, 3), torch.tensor([0, 1]), torch.empty(2, 3, dtype=torch.int64))


@pytest.mark.parametrize("numba", [True, False])
@pytest.mark.parametrize("what", ["position", "row"])
def test_copy_rows_rejects_entries_out_of_range(monkeypatch, numba, what):
    _use_backend(monkeypatch, numba)
    message = "entry 1 copies row" if numba else "out of"  # torch: "out of bounds" / "out of range"
    pos, rows = torch.tensor([1, 9 if what == "position" else 3]), torch.tensor([0, 7 if what == "row" else 1])
    out = torch.zeros(4, 4)
    with pytest.raises(IndexError, match=message):
        copy_rows(out, pos, torch.ones(5, 4), rows)
    if numba:
        assert out[1].eq(1).all() and out[3].eq(0).all()  # entries before the bad one are copied


def test_copy_rows_rejects_mismatched_inputs():
    with pytest.raises(InvalidArgumentError, match="src"):
        copy_rows(torch.zeros(4, 2), torch.tensor([0]), torch.zeros(1, 3), torch.tensor([0]))
    with pytest.raises(InvalidArgumentError, match="src_rows"):
        copy_rows(torch.zeros(4, 2), torch.tensor([0, 1]), torch.zeros(3, 2), torch.tensor([0]))


def test_split_by_owner_range_book_matches_the_generic_split():
    gen = torch.Generator().manual_seed(3)
    for bounds in ([0, 3, 5, 5, 9], [0, 1000], [0, 10, 20, 30, 40, 50, 60, 70, 80]):
        book = PartitionBook({"_N": torch.tensor(bounds)})
        ids = torch.randint(0, bounds[-1], (500,), generator=gen)
        order, rows, ptr = book.split_by_owner("_N", ids)
        owner = book.owner("_N", ids)
        for p in range(book.num_parts):
            pos = order[ptr[p]:ptr[p + 1]]
            assert torch.equal(pos, (owner == p).nonzero().view(-1))  # ascending, exactly p's ids
            assert torch.equal(rows[ptr[p]:ptr[p + 1]], ids[pos] - bounds[p])
        generic = _BookBase.split_by_owner(book, "_N", ids)
        assert torch.equal(generic[0], order) and torch.equal(generic[1], rows) and generic[2] == ptr


def test_split_by_owner_dense_book_and_bad_ids():
    book = DensePartitionBook({"_N": torch.tensor([1, 0, 1, 0, 0])}, 2)
    order, rows, ptr = book.split_by_owner("_N", torch.tensor([4, 0, 2, 3]))
    assert order.tolist() == [0, 3, 1, 2] and ptr == [0, 2, 4]  # owners of 4, 0, 2, 3: 0, 1, 1, 0
    assert torch.equal(rows, book.to_local("_N", torch.tensor([4, 0, 2, 3]))[order])
    with pytest.raises(InvalidArgumentError, match="ids"):
        PartitionBook({"_N": torch.tensor([0, 3, 5])}).split_by_owner("_N", torch.tensor([5]))


def test_lookup_replies_come_in_chunks_and_reassemble(monkeypatch):
    monkeypatch.setattr(serving, "CHUNK_BYTES", 10 * 400)  # 10 rows of 100 float32 per chunk
    book = PartitionBook({"_N": torch.tensor([0, 100, 250])})
    x1 = torch.randn(150, 100)
    ids = torch.randint(0, 250, (333,))
    plan = lookup.plan_lookup(book, 0, [lookup.FeatureQuery("_N", ("x",), ids)])
    reply = serving.serve_request(book, 1, lambda g, n: x1, plan.requests[1])
    chunks = reply.values[0]["x"]
    assert len(chunks) > 1 and all(c.size(0) <= 10 for c in chunks)
    x0 = torch.randn(100, 100)
    out = [{"x": lookup.gather_local(plan.routes[0], x0)}]
    lookup._scatter(plan, out, lookup._Pending(1, None, plan.slots[1]), reply)
    assert torch.equal(out[0]["x"], torch.cat([x0, x1])[ids])
    reply.values[0]["x"] = chunks[:-1]  # a lost chunk fails loudly
    with pytest.raises(PyGDistError, match="attribute 'x'"):
        lookup._scatter(plan, out, lookup._Pending(1, None, plan.slots[1]), reply)


def test_tune_allocator_applies_once_and_can_be_disabled():
    code = "from pyg_dist._alloc import tune_allocator; print(tune_allocator(), tune_allocator())"
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYG_DIST_MALLOC_TUNING": "0"})
    libc = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None
    if libc and libc.startswith("glibc"):
        assert on.stdout.split() == ["True", "True"], on.stderr
    assert off.stdout.split() == ["False", "False"], off.stderr


_THP = """
import os, sys
import torch
from pyg_dist._alloc import tune_allocator
tune_allocator()
def faults():
    return int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[7])
f0 = faults()
for _ in range(20):
    x = torch.ones(10 << 20)  # 40 MB: above glibc's largest mmap threshold, mapped afresh every time
    del x
print(os.environ.get("THP_MEM_ALLOC_ENABLE"), faults() - f0)
"""


def _thp_mode() -> str:
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return "absent"
    return text[text.index("[") + 1:text.index("]")] if "[" in text else "absent"


def test_tune_allocator_asks_torch_for_huge_pages_unless_told_otherwise():
    def run(**env):
        out = subprocess.run([sys.executable, "-c", _THP], capture_output=True, text=True, timeout=120,
                             env={k: v for k, v in {**os.environ, **env}.items() if v is not None})
        assert out.returncode == 0, out.stderr
        flag, faults = out.stdout.split()
        return flag, int(faults)
    base = {"THP_MEM_ALLOC_ENABLE": None}
    tuned, kept, off = run(**base), run(THP_MEM_ALLOC_ENABLE="0"), run(**base, PYG_DIST_MALLOC_TUNING="0")
    assert (tuned[0], kept[0], off[0]) == ("1", "0", "None")
    if sys.platform.startswith("linux") and _thp_mode() in ("always", "madvise"):
        assert tuned[1] * 4 < kept[1], (tuned, kept)  # 2 MiB pages: far fewer faults for the same bytes


_LATCH = """
import sys, warnings
if sys.argv[1] == "pyg_first":
    import torch_geometric  # allocates 2 MiB or more: torch reads THP_MEM_ALLOC_ENABLE now
from pyg_dist._alloc import tune_allocator, huge_pages_in_effect, warn_huge_pages_missed
tune_allocator()
import torch
def faults():
    return int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[7])
f0 = faults()
for _ in range(10):
    x = torch.ones(10 << 20)
    del x
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    warned = warn_huge_pages_missed(0), warn_huge_pages_missed(1)
print(huge_pages_in_effect(), faults() - f0, *warned,
      sum(w.category is RuntimeWarning and "THP_MEM_ALLOC_ENABLE=1" in str(w.message) for w in seen))
"""


def test_huge_pages_are_probed_and_a_late_setting_is_warned_about_on_rank_0():
    if not sys.platform.startswith("linux") or _thp_mode() not in ("always", "madvise"):
        pytest.skip(f"the kernel's transparent huge pages are {_thp_mode()!r}: torch cannot use them here")

    def run(order, **env):
        out = subprocess.run([sys.executable, "-c", _LATCH, order], capture_output=True, text=True, timeout=120,
                             env={k: v for k, v in {**os.environ, "THP_MEM_ALLOC_ENABLE": None, **env}.items()
                                  if v is not None})
        assert out.returncode == 0, out.stderr
        on, faults, warned0, warned1, seen = out.stdout.split()
        return on, int(faults), warned0, warned1, seen
    late = run("pyg_first")                                    # the session's setting comes after PyG's import
    early = run("pyg_first", THP_MEM_ALLOC_ENABLE="1")        # set at launch, as pyg_dist's launchers do
    first = run("pyg_dist_first")                              # nothing large allocated before tune_allocator
    off = run("pyg_first", PYG_DIST_MALLOC_TUNING="0")        # tuning off: nothing asked, nothing to warn about
    assert late[0] == "False" and late[2:] == ("True", "False", "1"), late
    assert early[0] == first[0] == "True" and early[2:] == first[2:] == ("False", "False", "0"), (early, first)
    assert off[0] == "False" and off[2:] == ("False", "False", "0"), off
    assert early[1] * 4 < late[1] and first[1] * 4 < late[1], (late, early, first)  # the probe tells the truth


_THREAD_HEAP = """
import ctypes, sys, threading
from pyg_dist._alloc import tune_allocator
print(tune_allocator())
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = libc.sbrk.restype = ctypes.c_void_p
libc.malloc.argtypes, libc.sbrk.argtypes = [ctypes.c_size_t], [ctypes.c_ssize_t]
got = []
def alloc():  # a thread created after tuning, like torch's RPC pool and TensorPipe's loops
    got.append(libc.malloc(1 << 16))
t = threading.Thread(target=alloc)
t.start()
t.join()
print(got[0] < libc.sbrk(0))  # the main heap ends at the program break; other arenas are mmap-ed above it
"""


def test_tune_allocator_puts_later_threads_on_the_main_heap():
    libc = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None
    if not (libc and libc.startswith("glibc")):
        pytest.skip(f"glibc's arenas only (this C library: {libc})")
    on = subprocess.run([sys.executable, "-c", _THREAD_HEAP], capture_output=True, text=True, timeout=60)
    off = subprocess.run([sys.executable, "-c", _THREAD_HEAP], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYG_DIST_MALLOC_TUNING": "0"})
    assert on.stdout.split() == ["True", "True"], on.stderr
    assert off.stdout.split() == ["False", "False"], off.stderr  # glibc gives a new thread its own arena


def test_scatter_segments_numba_and_torch_agree_with_a_loop(monkeypatch):
    from pyg_dist.ops import numba_unavailable_reason
    from pyg_dist.ops import rows as R
    if numba_unavailable_reason() is not None:  # the torch half alone: tests/ops/test_backend_switch.py
        pytest.skip(f"compares with the numba kernel: {numba_unavailable_reason()}")
    gen = torch.Generator().manual_seed(5)
    pos = torch.randperm(60, generator=gen)
    counts = torch.randint(0, 7, (60,), generator=gen)
    nbr = torch.randint(0, 10 ** 6, (int(counts.sum()),), generator=gen)
    edge = torch.randint(0, 10 ** 6, (int(counts.sum()),), generator=gen)
    segs = list(zip(torch.split(nbr, counts.tolist()), torch.split(edge, counts.tolist())))
    order = {int(p): j for j, p in enumerate(pos)}
    want_nbr = torch.cat([segs[order[i]][0] for i in range(60)])
    want_edge = torch.cat([segs[order[i]][1] for i in range(60)])
    want_counts = torch.stack([counts[order[i]] for i in range(60)])
    for numba_on in (True, False):
        monkeypatch.setattr(R, "numba_available", lambda on=numba_on: on)
        got = R.scatter_segments(pos, counts.to(torch.int32), nbr, edge)
        assert torch.equal(got[0], want_nbr) and torch.equal(got[1], want_edge) and torch.equal(got[2], want_counts)


def test_count_by_owner_matches_bincount_of_owner():
    book = PartitionBook({"_N": torch.tensor([0, 4, 4, 11, 30])})
    ids = torch.randint(0, 30, (400,), generator=torch.Generator().manual_seed(2))
    want = torch.bincount(book.owner("_N", ids), minlength=4).tolist()
    assert book.count_by_owner("_N", ids) == want == _BookBase.count_by_owner(book, "_N", ids)
    from pyg_dist.sampler.stats import remote_count
    assert remote_count(book, 2, "_N", ids) == (400 - want[2], {p for p in (0, 1, 3) if want[p]})


def test_rows_if_owned_translates_only_fully_owned_batches():
    book = PartitionBook({"_N": torch.tensor([0, 4, 10])})
    assert book.rows_if_owned("_N", 1, torch.tensor([9, 4, 7])).tolist() == [5, 0, 3]
    assert book.rows_if_owned("_N", 1, torch.tensor([9, 3, 7])) is None  # 3 belongs to partition 0
    assert book.rows_if_owned("_N", 0, torch.tensor([0, 3])).tolist() == [0, 3]
