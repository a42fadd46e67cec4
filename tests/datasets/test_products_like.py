"""The in-repo reference benchmark graph (pyg_dist.datasets.products_like) and the per-user data defaults."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pyg_dist.datasets import products_like as pl
from pyg_dist.datasets.planetoid import shared_data_root
from pyg_dist.datasets.registry import load_dataset
from pyg_dist.errors import InvalidArgumentError

REPO = Path(__file__).resolve().parents[2]
#: The project's former stand-alone generator, where a checkout has it beside the repository.
_SHARED = [REPO.parent / "shared" / "bench" / "products_like.py", Path("/work/shared/bench/products_like.py")]
SHARED_SCRIPT = next((p for p in _SHARED if p.is_file()), None)
SMALL = (20_000, 264_600)  # ogbn-products' ratio of drawn pairs to nodes, at 20,000 nodes


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # never the user's real cache


@pytest.fixture(scope="module")
def small():
    return pl.products_like_graph(*SMALL)


@pytest.mark.skipif(SHARED_SCRIPT is None, reason="the former stand-alone script shared/bench/products_like.py is "
                    f"not beside this checkout (looked at {', '.join(map(str, _SHARED))})")
@pytest.mark.parametrize("args", [SMALL + (0.85, 1200), (1000, 5000, 0.5, 50)])
def test_bit_identical_to_the_shared_script(tmp_path, small, args):
    out = tmp_path / "ref.pt"
    n, pairs, intra, comm = args
    subprocess.run([sys.executable, str(SHARED_SCRIPT), str(n), str(pairs), str(out), str(intra), str(comm)],
                   check=True, capture_output=True, timeout=120)
    ref = torch.load(out, weights_only=True)
    ours = small if args[:2] == SMALL else pl.products_like_graph(n, pairs, intra_frac=intra, community_size=comm)
    assert ours["N"] == ref["N"] == n
    for key in ("rowptr", "col"):
        assert ours[key].dtype == ref[key].dtype == torch.int64
        assert torch.equal(ours[key], ref[key]), key


def test_structure_symmetric_simple_power_law_and_communities(small):
    n, pairs = SMALL
    rowptr, col = small["rowptr"], small["col"]
    assert rowptr.shape == (n + 1,) and rowptr[0] == 0 and rowptr[-1] == col.numel()
    deg = torch.diff(rowptr)
    row = torch.repeat_interleave(torch.arange(n), deg)
    assert col.numel() <= 2 * pairs and col.numel() > 1.8 * pairs  # few duplicates / self loops at this density
    assert not bool((row == col).any())  # no self loops
    key = row * n + col
    assert bool((key[1:] > key[:-1]).all())  # sorted by row then column, no duplicate
    assert torch.equal(torch.sort(col * n + row).values, key)  # every edge in both directions
    # Chung-Lu weights rank ** -0.5: the heaviest node expects sqrt(n) / 2 ~ 70 times the mean degree
    assert int(deg.max()) > 20 * float(deg.float().mean())
    comm = pl.products_like_communities(*SMALL)
    assert torch.equal(torch.bincount(comm), torch.bincount(torch.arange(n) // pl.COMMUNITY_SIZE))
    inside = float((comm[row] == comm[col]).float().mean())
    assert 0.8 < inside < 0.92, inside  # 85 % drawn inside (+ ~1 % of the rest by chance), before dedup
    assert float((row // pl.COMMUNITY_SIZE == col // pl.COMMUNITY_SIZE).float().mean()) < 0.2  # ids relabelled


def test_same_seed_same_graph_other_seed_other_graph(small):
    again = pl.products_like_graph(*SMALL)
    assert torch.equal(again["rowptr"], small["rowptr"]) and torch.equal(again["col"], small["col"])
    other = pl.products_like_graph(*SMALL, seed=1)
    assert not torch.equal(other["rowptr"], small["rowptr"])


@pytest.mark.parametrize("kwargs,arg", [({"num_nodes": 0}, "num_nodes"), ({"num_pairs": -1}, "num_pairs"),
                                        ({"intra_frac": 1.5}, "intra_frac"), ({"community_size": 0}, "community_size"),
                                        ({"seed": "0"}, "seed"), ({"num_nodes": 4_000_000_000}, "num_nodes")])
def test_bad_arguments_name_the_argument(kwargs, arg):
    with pytest.raises(InvalidArgumentError, match=arg):
        pl.products_like_graph(**kwargs)


def test_file_is_cached_per_user_and_reused(tmp_path):
    path = pl.products_like_file(3000, 39_690)
    assert path.parent == tmp_path / "xdg" / "pyg_dist" / "products_like" and path.is_file()
    stamp = path.stat().st_mtime_ns
    assert pl.products_like_file(3000, 39_690) == path and path.stat().st_mtime_ns == stamp  # not regenerated
    saved, fresh = torch.load(path, weights_only=True), pl.products_like_graph(3000, 39_690)
    assert saved["N"] == 3000 and torch.equal(saved["col"], fresh["col"])
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    assert pl.products_like_file(3000, 39_690, seed=1) != path


def test_load_dataset_products_like_without_root(tmp_path):
    data = load_dataset("products_like", num_nodes=3000, x_dim=4, num_classes=3)
    g = pl.products_like_graph(3000, round(pl.PRODUCTS_PAIRS * 3000 / pl.PRODUCTS_NODES))
    assert data.num_nodes == 3000 and data.x.shape == (3000, 4) and int(data.y.max()) <= 2
    assert torch.equal(data.edge_index[1], g["col"])
    with pytest.raises(InvalidArgumentError, match="num_nodes"):
        load_dataset("products_like", tmp_path / "g.pt", num_nodes=3000)
    with pytest.raises(InvalidArgumentError, match="num_nodes"):
        load_dataset("products_like", num_nodes="many")


def test_cli_partitions_products_like_without_root(tmp_path, capsys):
    from pyg_dist.format.meta import read_meta
    from pyg_dist.partition.cli import main
    out = tmp_path / "pl-2"
    assert main(["--dataset", "products_like", "--num-nodes", "4000", "--x-dim", "8", "--num-parts", "2",
                 "--method", "random", "--out", str(out), "--quiet"]) == 0
    meta = read_meta(out)
    g = pl.products_like_graph(4000, round(pl.PRODUCTS_PAIRS * 4000 / pl.PRODUCTS_NODES))
    assert meta.num_parts == 2 and meta.num_nodes["_N"] == 4000
    assert meta.num_edges[("_N", "_E", "_N")] == g["col"].numel()
    assert "symmetric" in capsys.readouterr().out
    assert main(["--dataset", "products_like", "--num-nodes", "4000", "--avg-degree", "3", "--num-parts", "2",
                 "--out", str(tmp_path / "x")]) == 2
    assert "--avg-degree" in capsys.readouterr().err


def test_module_command_writes_the_file(tmp_path):
    out = tmp_path / "g.pt"
    proc = subprocess.run([sys.executable, "-m", "pyg_dist.datasets.products_like", str(out), "--num-nodes", "500",
                           "--num-pairs", "3000"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
    assert proc.returncode == 0, proc.stderr
    assert "N=500 " in proc.stdout
    assert torch.equal(torch.load(out, weights_only=True)["col"], pl.products_like_graph(500, 3000)["col"])


def test_data_root_defaults_to_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("PYG_DIST_DATA", raising=False)
    assert shared_data_root() == tmp_path / "xdg" / "pyg_dist" / "data"
    monkeypatch.setenv("PYG_DIST_DATA", "")  # empty counts as unset
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert shared_data_root() == tmp_path / "home" / ".cache" / "pyg_dist" / "data"
    monkeypatch.setenv("PYG_DIST_DATA", str(tmp_path / "mine"))
    assert shared_data_root() == tmp_path / "mine"
    from pyg_dist.envvars import ENV_VARS
    assert "~/.cache/pyg_dist/data" in next(v for v in ENV_VARS if v.name == "PYG_DIST_DATA").default
