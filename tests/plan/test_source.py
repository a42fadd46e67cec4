"""Where the planner's partition folders come from: the partitioner's arguments for the graph and its stored
feature dtype, and a folder in ``--work`` written with another dtype refused, not measured."""
from types import SimpleNamespace

import pytest
import torch

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.plan.source import dataset_args, folder, folder_dtype


def _args(work, dtype=None):
    return SimpleNamespace(graph=None, dataset="synthetic", root=None, x_dim=8, num_classes=None, train_frac=None,
                           feature_dtype=dtype, work=str(work), method="random")


def test_the_feature_dtype_goes_to_the_partitioner():
    assert dataset_args(_args("w", "bfloat16")) == ["--dataset", "synthetic", "--x-dim", "8",
                                                    "--feature-dtype", "bfloat16"]
    assert "--feature-dtype" not in dataset_args(_args("w"))


def test_a_folder_of_another_dtype_is_refused_naming_it(tmp_path):
    from torch_geometric.data import Data

    from pyg_dist.partition import Partitioner
    ei = torch.randint(0, 40, (2, 120))
    Partitioner(Data(edge_index=ei, num_nodes=40, x=torch.randn(40, 4)), 2, method="random").save(
        tmp_path / "parts-2", progress=False)
    assert folder_dtype(tmp_path / "parts-2") == "float32"
    assert folder(_args(tmp_path), 2) == tmp_path / "parts-2"              # no dtype asked: the folder as it is
    assert folder(_args(tmp_path, "float32"), 2) == tmp_path / "parts-2"
    with pytest.raises(InvalidArgumentError, match=r"--feature-dtype.*bfloat16.*parts-2 \(float32\)"):
        folder(_args(tmp_path, "bfloat16"), 2)


@pytest.mark.parametrize("record", [["x"], {"node": ["x"]}, {"node": {"_N": "x"}}, "float32"])
def test_a_malformed_dtype_record_reads_as_none(tmp_path, record):
    """A hand-edited ``attr_dtypes`` that is not the partitioner's mapping says nothing about ``x`` (the
    store's own check at opening names it), never an ``AttributeError`` from the planner."""
    import json

    from torch_geometric.data import Data

    from pyg_dist.partition import Partitioner
    out = tmp_path / "parts-2"
    Partitioner(Data(edge_index=torch.randint(0, 40, (2, 120)), num_nodes=40, x=torch.randn(40, 4)), 2,
                method="random").save(out, progress=False)
    raw = json.loads((out / "META.json").read_text())
    raw["pyg_dist"]["attr_dtypes"] = record
    (out / "META.json").write_text(json.dumps(raw))
    assert folder_dtype(out) is None


def test_a_broken_meta_in_work_is_named(tmp_path):
    from pyg_dist.errors import PartitionFormatError
    (tmp_path / "parts-2").mkdir()
    (tmp_path / "parts-2" / "META.json").write_text("{not json")
    with pytest.raises(PartitionFormatError, match=r"parts-2/META.json.*JSON"):
        folder(_args(tmp_path, "float32"), 2)
    with pytest.raises(PartitionFormatError, match=r"META.json"):
        folder_dtype(tmp_path / "parts-2")
