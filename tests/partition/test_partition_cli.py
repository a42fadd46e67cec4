"""The command line (in-process main() and the real script) and the linear-time kernels."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pyg_dist.datasets.planetoid import shared_data_root
from pyg_dist.format import load_partition, read_meta
from pyg_dist.ops.graph_kernels import relabel_csc, symmetric_csr
from pyg_dist.partition.cli import main
from pyg_dist.partition.metis import metis_kway
from pyg_dist.testing.oracles import sorted_pairs

REPO = Path(__file__).resolve().parents[2]


def test_cli_synthetic_hetero_two_level(tmp_path, capsys):
    rc = main(["--dataset", "synthetic", "--num-nodes", "900", "--avg-degree", "6", "--hetero", "--node-time",
               "--edge-time", "--num-parts", "3", "--method", "supernode", "--num-clusters", "30",
               "--sub-parts", "2", "--out", str(tmp_path / "o"), "--quiet"])
    assert rc == 0
    meta = read_meta(tmp_path / "o")
    assert meta.is_hetero and meta.sub_parts == 2 and meta.method == "supernode"
    assert meta.node_time_types == ["paper", "author", "field"] and len(meta.edge_time_types) == 9
    assert "edge cut" in capsys.readouterr().out


def test_cli_edgelist_hybrid(tmp_path):
    folder = tmp_path / "g"
    folder.mkdir()
    rng = np.random.default_rng(0)
    np.savetxt(folder / "edges.txt", rng.integers(0, 50, (200, 2)), fmt="%d")
    np.save(folder / "feat.npy", rng.normal(size=(50, 3)).astype(np.float32))
    rc = main(["--dataset", "edgelist", "--root", str(folder), "--undirected", "--attr", f"x={folder / 'feat.npy'}",
               "--num-parts", "2", "--method", "hybrid", "--base-method", "random", "--out", str(tmp_path / "o"),
               "--quiet"])
    assert rc == 0
    pd = load_partition(tmp_path / "o", 1)
    pairs = {tuple(e) for e in np.loadtxt(folder / "edges.txt", dtype=np.int64).tolist()}
    raw = np.loadtxt(folder / "edges.txt", dtype=np.int64).tolist()
    expected = len(raw) + sum(1 for a, b in raw if (b, a) not in pairs)  # every missing reverse added
    assert pd.meta.hybrid and pd.graph[("_N", "_E", "_N")].row.numel() == expected
    assert pd.node_feats["_N"].feats["x"].shape == (25, 3)


@pytest.mark.parametrize("argv,needle", [
    (["--num-nodes", "100", "--num-parts", "0"], "num_parts"),
    (["--num-nodes", "100", "--num-parts", "2", "--method", "kmeans"], "method"),
    (["--num-nodes", "-5", "--num-parts", "2"], "num_nodes"),
])
def test_cli_user_errors_exit_2(tmp_path, capsys, argv, needle):
    rc = main(["--dataset", "synthetic", "--out", str(tmp_path / "o"), "--quiet"] + argv)
    assert rc == 2 and needle in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv,needle", [
    (["--dataset", "synthetic", "--x-dim", "4"], "--x-dim"),
    (["--dataset", "synthetic", "--root", "/tmp"], "--root"),
    (["--dataset", "synthetic", "--split", "time"], "--split"),
    (["--dataset", "synthetic", "--attr", "x=f.npy"], "--attr"),
    (["--dataset", "synthetic", "--train-frac", "0.5"], "--train-frac"),
    (["--dataset", "synthetic", "--method", "metis", "--num-clusters", "8"], "--num-clusters"),
    (["--dataset", "synthetic", "--method", "random", "--ufactor", "10"], "--ufactor"),
    (["--dataset", "synthetic", "--method", "random", "--no-balance"], "--no-balance"),
    (["--dataset", "synthetic", "--method", "metis", "--base-method", "random"], "--base-method"),
    (["--dataset", "synthetic", "--no-undirected"], "undirected"),
    (["--dataset", "edgelist", "--root", "/tmp", "--hetero"], "--hetero"),
    (["--dataset", "ogbn-x", "--root", "/tmp", "--attr", "x=f.npy"], "--attr"),
    (["--dataset", "products_like", "--root", "/tmp", "--avg-degree", "3"], "--avg-degree"),
])
def test_cli_option_that_does_not_apply_is_an_error(tmp_path, capsys, argv, needle):
    rc = main(argv + ["--num-parts", "2", "--out", str(tmp_path / "o"), "--quiet"])
    assert rc == 2 and needle in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _ogb_folder(root, name, edges, n):
    import gzip
    base = root / name.replace("-", "_") / "raw"
    base.mkdir(parents=True)
    with gzip.open(base / "edge.csv.gz", "wt") as f:
        f.writelines(f"{a},{b}\n" for a, b in edges)
    with gzip.open(base / "num-node-list.csv.gz", "wt") as f:
        f.write(f"{n}\n")


@pytest.mark.parametrize("flag,expected_edges,note", [
    ([], 3, "not in the table of known OGB datasets"),
    (["--undirected"], 6, "symmetric"),
    (["--no-undirected"], 3, "lack their reverse"),
])
def test_cli_unknown_ogb_name_reports_edge_direction(tmp_path, capsys, flag, expected_edges, note):
    _ogb_folder(tmp_path / "ogb", "ogbn-tiny", [(0, 1), (1, 2), (3, 0)], 4)
    rc = main(["--dataset", "ogbn-tiny", "--root", str(tmp_path / "ogb"), "--num-parts", "2", "--method", "random",
               "--out", str(tmp_path / "o"), "--quiet"] + flag)
    out = capsys.readouterr().out
    assert rc == 0 and note in out
    assert read_meta(tmp_path / "o").num_edges[("_N", "_E", "_N")] == expected_edges


def test_cli_undirected_on_csr_file_and_synthetic(tmp_path, capsys):
    torch.save({"rowptr": torch.tensor([0, 1, 1, 2]), "col": torch.tensor([1, 0]), "N": 3}, tmp_path / "g.pt")
    for flag, edges in (([], 2), (["--undirected"], 4)):
        out = tmp_path / f"o{len(flag)}"
        assert main(["--dataset", "products_like", "--root", str(tmp_path / "g.pt"), "--num-parts", "1",
                     "--method", "random", "--out", str(out), "--quiet"] + flag) == 0
        assert read_meta(out).num_edges[("_N", "_E", "_N")] == edges
    assert main(["--dataset", "synthetic", "--num-nodes", "200", "--undirected", "--num-parts", "2",
                 "--out", str(tmp_path / "s"), "--quiet"]) == 0
    assert "edges: symmetric" in capsys.readouterr().out


def test_cli_refuses_non_empty_out_and_unreadable_input(tmp_path, capsys):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "f").write_text("x")
    assert main(["--dataset", "synthetic", "--num-parts", "2", "--out", str(tmp_path / "o")]) == 2
    assert "overwrite" in capsys.readouterr().err
    (tmp_path / "bad.pt").write_bytes(b"garbage")
    assert main(["--dataset", "products_like", "--root", str(tmp_path / "bad.pt"), "--num-parts", "2",
                 "--out", str(tmp_path / "p")]) == 2
    assert "root" in capsys.readouterr().err


def test_script_on_cora(tmp_path):
    root = shared_data_root() / "planetoid"
    if not (root / "Cora" / "raw").is_dir():
        pytest.skip(f"Cora raw files not found under {root}")
    out = tmp_path / "cora-2"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "partition_graph.py"), "--dataset", "cora",
                           "--root", str(root), "--num-parts", "2", "--method", "metis", "--out", str(out),
                           "--quiet"], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    meta = read_meta(out)
    assert meta.num_nodes["_N"] == 2708 and meta.num_edges[("_N", "_E", "_N")] == 10556
    assert "edges: symmetric" in proc.stdout
    again = subprocess.run([sys.executable, str(REPO / "scripts" / "partition_graph.py"), "--dataset", "cora",
                            "--root", str(root), "--num-parts", "2", "--method", "random", "--undirected",
                            "--out", str(tmp_path / "u"), "--quiet"], capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr
    assert read_meta(tmp_path / "u").num_edges[("_N", "_E", "_N")] == 10556  # already symmetric: unchanged
    assert meta.stats["edge_cut"] < 0.15  # Cora's 2-way METIS cut is a few percent
    train = sum(int(load_partition(out, p).node_feats["_N"].feats["train_mask"].sum()) for p in range(2))
    assert train == 140


@pytest.mark.parametrize("n,m,presort", [(1, 0, None), (40, 300, None), (40, 300, "plain"),
                                         (40, 300, "symmetric"), (40, 300, "loops"),
                                         (40, 300, "duplicates"), (7, 49, None)])
def test_symmetric_csr_matches_oracle(n, m, presort):
    """Unsorted input, sorted input (one-pass transpose), and already-symmetric simple input (returned
    as it is) all give the undirected, loop-free, deduplicated CSR."""
    gen = torch.Generator().manual_seed(0)
    s, d = torch.randint(0, n, (m,), generator=gen), torch.randint(0, n, (m,), generator=gen)
    if presort:
        s, d = sorted_pairs(s, d, n, presort)
    xadj, adj = symmetric_csr(s, d, n)
    keep = s != d
    key = torch.unique(torch.cat([s[keep] * n + d[keep], d[keep] * n + s[keep]]))
    ptr = torch.zeros(n + 1, dtype=torch.long)
    ptr[1:] = torch.cumsum(torch.bincount(key // n, minlength=n), 0)
    assert np.array_equal(xadj, ptr.numpy()) and np.array_equal(adj, (key % n).numpy())


def test_relabel_csc_is_stable_dst_sort():
    gen = torch.Generator().manual_seed(1)
    ei = torch.randint(0, 30, (2, 500), generator=gen)
    inv_s, inv_d = torch.randperm(30, generator=gen), torch.randperm(30, generator=gen)
    perm, row, col, ptr = relabel_csc(ei, inv_s, inv_d, 30)
    ref = torch.sort(inv_d[ei[1]], stable=True).indices
    assert torch.equal(perm, ref) and torch.equal(row, inv_s[ei[0]][ref]) and torch.equal(col, inv_d[ei[1]][ref])
    assert torch.equal(ptr, torch.searchsorted(col, torch.arange(31)))
    time_order = torch.randperm(500, generator=gen)
    perm2, *_ = relabel_csc(ei, inv_s, inv_d, 30, time_order)
    assert torch.equal(perm2, time_order[torch.sort(inv_d[ei[1]][time_order], stable=True).indices])


def test_metis_honours_every_constraint():
    """pymetis.part_graph would read one weight per vertex; the ctypes call balances all three."""
    from pyg_dist.datasets.synthetic import dcsbm_edges
    n = 6000
    s, d = dcsbm_edges(n, 30000, community_size=100, seed=1)
    xadj, adj = symmetric_csr(s, d, n)
    gen = torch.Generator().manual_seed(2)
    skew = (torch.arange(n) < n // 10).long() * 5  # heavy weight on a tenth of the ids
    w = torch.stack([torch.ones(n, dtype=torch.long), skew[torch.randperm(n, generator=gen)],
                     torch.from_numpy(np.diff(xadj))], 1).numpy()
    part, _ = metis_kway(xadj, adj, 4, w, seed=0, ufactor=30)
    for j in range(3):
        per = np.bincount(part.numpy(), weights=w[:, j], minlength=4)
        assert per.max() / per.mean() < 1.05, (j, per)


def test_version_has_one_source(capsys):
    import importlib.metadata

    import pyg_dist
    from pyg_dist._version import __version__
    from pyg_dist.partition.cli import main as cli_main
    with pytest.raises(SystemExit) as exc:
        cli_main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"pyg-dist-partition {__version__}"
    assert pyg_dist.__version__ == __version__ == importlib.metadata.version("pyg-dist")
