"""``pyg-dist-partition --plot`` and the benchmarks' ``--plot PATH`` helper: a readable PNG whose bars are the
numbers the partition folder really holds (recounted from the partitions, not taken from the report)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from pyg_dist.errors import MissingDependencyError
from pyg_dist.format import load_partition, read_meta
from pyg_dist.partition import plot as P
from pyg_dist.partition.cli import main
from pyg_dist.testing import load_script

pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: A hand-made report of 2 parts without training nodes.
STATS = {"num_parts": 2, "edge_cut": 0.1, "halo_ratio": 0.2, "edge_balance": 1.0, "edges_per_part": [5, 6],
         "nodes_per_part": {"_N": [3, 3]}, "halo_nodes_per_part": [1, 2], "train_per_part": {}}


def _spy(monkeypatch):
    """Records what every plot_partition_report call drew (the CLI imports it at call time)."""
    drawn = []
    original = P.plot_partition_report

    def spy(stats, path, label=""):
        drawn.append((stats, Path(path), original(stats, path, label)))
        return drawn[-1][2]
    monkeypatch.setattr(P, "plot_partition_report", spy)
    return drawn


def _check_png(path: Path):
    import matplotlib.image as mpimg
    raw = path.read_bytes()
    assert raw[:8] == PNG_MAGIC and len(raw) > 5000
    img = mpimg.imread(str(path))
    assert img.ndim == 3 and img.shape[0] >= 300 and img.shape[1] >= 400 and img.shape[2] in (3, 4)
    assert float(img[..., :3].std()) > 0.05  # not a blank canvas


def _folder_counts(root: Path):
    """Per part, recounted from the written partitions: owned nodes and training nodes per node type, stored
    edges, and halo nodes (distinct non-owned sources of the part's in-edges, per source type)."""
    meta = read_meta(root)
    nodes, train = {t: [] for t in meta.node_types}, {}
    edges, halo = [], []
    for p in range(meta.num_parts):
        pd = load_partition(root, p)
        for t in meta.node_types:
            lo, hi = pd.book.owned_range(t, p)
            assert pd.node_feats[t].global_id.numel() == hi - lo
            nodes[t].append(hi - lo)
            if "train_mask" in pd.node_feats[t].feats:
                train.setdefault(t, []).append(int(pd.node_feats[t].feats["train_mask"].sum()))
        edges.append(sum(g.row.numel() for g in pd.graph.values()))
        marks = {}
        for (s, _, _), g in pd.graph.items():
            lo, hi = pd.book.owned_range(s, p)
            remote = g.row[(g.row < lo) | (g.row >= hi)]
            marks[s] = torch.cat([marks.get(s, remote[:0]), remote]).unique()
        halo.append(sum(m.numel() for m in marks.values()))
    return meta, nodes, train, edges, halo


@pytest.mark.parametrize("extra", [[], ["--hetero"]], ids=["homo", "hetero"])
def test_cli_plot_draws_the_folders_numbers(tmp_path, monkeypatch, capsys, extra):
    drawn = _spy(monkeypatch)
    out = tmp_path / "o"
    rc = main(["--dataset", "synthetic", "--num-nodes", "600", "--avg-degree", "6", "--num-parts", "3",
               "--out", str(out), "--quiet", "--plot"] + extra)
    assert rc == 0
    text = capsys.readouterr().out
    png = out / "partition_report.png"
    assert f"chart: {png}" in text and "edge cut" in text
    _check_png(png)
    (stats, path, series), = drawn
    assert path == png
    meta, nodes, train, edges, halo = _folder_counts(out)
    assert series["nodes"] == {str(t): v for t, v in nodes.items()}
    assert series["edges"] == {"all edge types": edges}
    assert series["halo nodes"] == {"all node types": halo}
    assert series["training nodes"] == {str(t): v for t, v in train.items()} and train
    assert meta.stats["nodes_per_part"] == stats["nodes_per_part"]  # the report's numbers, as META keeps them
    assert meta.stats["halo_nodes_per_part"] == halo and meta.stats["edges_per_part"] == edges
    assert f"halo nodes per part: {halo}" in text  # the text report says the same


def test_cli_plot_out_of_core(tmp_path, monkeypatch, capsys):
    drawn = _spy(monkeypatch)
    out = tmp_path / "o"
    rc = main(["--dataset", "synthetic", "--num-nodes", "300", "--out-of-core", "--num-parts", "2",
               "--method", "fennel", "--out", str(out), "--quiet", "--plot"])
    assert rc == 0 and f"chart: {out / 'partition_report.png'}" in capsys.readouterr().out
    _check_png(out / "partition_report.png")
    _, nodes, train, edges, halo = _folder_counts(out)
    series = drawn[0][2]
    assert series["nodes"] == {"_N": nodes["_N"]} and series["edges"]["all edge types"] == edges
    assert series["halo nodes"]["all node types"] == halo and series["training nodes"] == {"_N": train["_N"]}


def test_no_train_mask_panel_says_so(tmp_path):
    series = P.plot_partition_report(STATS, tmp_path / "sub" / "r.png")
    assert series["training nodes"] == {}
    _check_png(tmp_path / "sub" / "r.png")


def _hide_matplotlib(monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # import of a None entry raises ImportError


def test_missing_matplotlib_is_a_typed_error_before_partitioning(tmp_path, monkeypatch, capsys):
    _hide_matplotlib(monkeypatch)
    with pytest.raises(MissingDependencyError, match=r'pip install matplotlib'):
        P.plot_partition_report(STATS, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
    rc = main(["--dataset", "synthetic", "--num-nodes", "100", "--num-parts", "2", "--out", str(tmp_path / "o"),
               "--quiet", "--plot"])
    err = capsys.readouterr().err
    assert rc == 2 and "matplotlib" in err and 'pip install matplotlib' in err
    assert not (tmp_path / "o").exists()  # failed fast: nothing partitioned


def _bench_plot():
    return load_script(REPO / "scripts" / "bench_plot.py")


def test_bench_plot_hand_made_rows(tmp_path, capsys):
    bp = _bench_plot()
    rows = [{"method": "metis", "parts": 2, "edge_cut": 0.10, "wall_s": 3.0},
            {"method": "metis", "parts": 4, "edge_cut": 0.20, "wall_s": 4.0},
            {"method": "random", "parts": 2, "edge_cut": 0.50, "wall_s": 1.0},
            {"method": "random", "parts": 4, "error": "boom"},  # a failed row: no bar
            {"method": "hybrid", "parts": 4, "edge_cut": 0.25, "wall_s": 5.5}]
    cats, series = bp.bar_chart(rows, x="method", ys={"edge_cut": "edge cut", "wall_s": "wall s"},
                                path=tmp_path / "b.png", title="t", group="parts", group_label="{} parts")
    assert cats == ["metis", "random", "hybrid"]
    cut = series["edge cut"]
    assert list(cut) == ["2 parts", "4 parts"]
    assert cut["2 parts"][:2] == [0.10, 0.50] and math.isnan(cut["2 parts"][2])
    assert cut["4 parts"][0] == 0.20 and math.isnan(cut["4 parts"][1]) and cut["4 parts"][2] == 0.25
    assert series["wall s"]["4 parts"][2] == 5.5
    assert f"# chart: {tmp_path / 'b.png'}" in capsys.readouterr().err
    _check_png(tmp_path / "b.png")
    cats, series = bp.bar_chart(rows[:3], x="method", ys={"wall_s": "wall s"}, path=tmp_path / "c.png")
    assert cats == ["metis", "random"] and series == {"wall s": {"": [4.0, 1.0]}}  # last row of a pair wins
    _check_png(tmp_path / "c.png")
