"""Every loader kind's fixed-seed batches equal, bit for bit, those recorded before the loaders were rebuilt
(:mod:`tests.loader.batch_replay`; re-record only for a change that is meant to alter batches)."""
from __future__ import annotations

import pytest

from tests.loader import batch_replay


def _recorded(prefix: str):
    return {k: v for k, v in batch_replay.recorded().items() if k.startswith(prefix)}


def _compare(got, want):
    assert sorted(got) == sorted(want), "the replayed configurations differ from the recorded ones"
    for name in sorted(want):
        for i, (g, w) in enumerate(zip(got[name], want[name])):
            assert g == w, f"{name}: batch {i} differs from the recorded one ({g} != {w})"
        assert len(got[name]) == len(want[name]), name


def test_digest_sees_one_flipped_bit_and_a_dtype():
    import torch
    from torch_geometric.data import Data
    a = Data(x=torch.arange(6, dtype=torch.float32).view(3, 2), edge_index=torch.tensor([[0, 1], [1, 2]]))
    b = a.clone()
    b.x.view(torch.int32)[1, 1] ^= 1
    c = a.clone()
    c.edge_index = c.edge_index.to(torch.int32)
    assert len({batch_replay.batch_digest(d) for d in (a, b, c)}) == 3
    assert batch_replay.batch_digest(a) == batch_replay.batch_digest(a.clone())


@pytest.mark.timeout(120)
def test_one_machine_loaders_replay_bit_for_bit():
    _compare(batch_replay.one_machine(), _recorded("one/"))


@pytest.mark.timeout(600)
def test_distributed_loaders_replay_bit_for_bit(tmp_path):
    want = {k: v for k, v in _recorded("").items() if not k.startswith("one/")}
    _compare(batch_replay.two_ranks(str(tmp_path)), want)
