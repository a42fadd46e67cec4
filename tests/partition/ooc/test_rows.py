"""A partition's attribute rows written in chunks (:mod:`pyg_dist.partition.ooc.rows`).

Oracles: the rows gathered and cast at once; the in-memory checks' own lines and errors
(:func:`~pyg_dist.partition.source.nonfinite_rows`, :func:`~pyg_dist.format.precision.cast_features`) on the
whole attribute."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.format.precision import cast_features
from pyg_dist.partition.ooc.rows import mapped_rows
from pyg_dist.partition.source import nonfinite_rows

LABEL = "node attribute _N"


def _attrs(n=500):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 7, generator=g)
    return {"x": x, "y": torch.randint(0, 5, (n,), generator=g), "train_mask": torch.rand(n, generator=g) < 0.3}


@pytest.mark.parametrize("dtype", [None, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("budget", [1, 300, 1 << 30])  # one row a chunk, a few rows, everything at once
def test_chunked_rows_equal_the_whole_gathered_and_cast(tmp_path, dtype, budget):
    attrs = _attrs()
    idx = np.random.default_rng(1).permutation(500)[:321]
    got = mapped_rows(attrs, idx, LABEL, [], False, dtype, tmp_path / "n", budget)
    whole = cast_features({k: v[torch.from_numpy(idx)] for k, v in attrs.items()}, dtype, "w", "feature_dtype", LABEL)
    for k in attrs:
        assert got[k].dtype == whole[k].dtype and torch.equal(got[k], whole[k]), k


def test_non_finite_rows_are_named_as_the_whole_check_names_them(tmp_path):
    attrs = _attrs()
    attrs["x"][[3, 40, 41, 200, 201, 202, 450]] = float("nan")
    idx = np.arange(500)
    want = nonfinite_rows("OutOfCorePartitioner", f"{LABEL}.x", attrs["x"], True, scope=" in one partition")
    lines: list = []
    mapped_rows(attrs, idx, LABEL, lines, True, None, tmp_path / "n", budget=7 * 4 * 4 * 3)  # 3 rows a chunk
    assert lines == [want]
    assert "7 rows" in want and "[3, 40, 41, 200, 201]" in want
    with pytest.raises(InvalidArgumentError) as refused:
        mapped_rows(attrs, idx, LABEL, [], False, None, tmp_path / "m", budget=64)
    assert str(refused.value) == str(pytest.raises(InvalidArgumentError, nonfinite_rows, "OutOfCorePartitioner",
                                                   f"{LABEL}.x", attrs["x"], False,
                                                   scope=" in one partition").value)


def test_a_float16_overflow_is_refused_naming_every_row(tmp_path):
    attrs = _attrs()
    attrs["x"][[5, 6, 300]] = 1e6
    idx = np.arange(500)
    with pytest.raises(InvalidArgumentError) as whole:
        cast_features(attrs, torch.float16, "OutOfCorePartitioner", "feature_dtype", LABEL)
    with pytest.raises(InvalidArgumentError) as chunked:
        mapped_rows(attrs, idx, LABEL, [], False, torch.float16, tmp_path / "n", budget=100)
    assert str(chunked.value) == str(whole.value)
    assert "3 rows overflow" in str(whole.value)


def test_no_rows_is_an_empty_tensor_of_the_stored_dtype(tmp_path):
    got = mapped_rows(_attrs(), np.zeros(0, dtype=np.int64), LABEL, [], False, torch.bfloat16, tmp_path / "n", 1024)
    assert got["x"].shape == (0, 7) and got["x"].dtype == torch.bfloat16 and got["y"].dtype == torch.int64
