"""The out-of-core pipeline across ranks: 2 spawned ranks (gloo on 127.0.0.1) write the folder a single
process writes, byte for byte, for every method, homo and hetero, from tensors and from chunk files."""
from __future__ import annotations

import numpy as np

from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner
from pyg_dist.testing.world import spawn_world
from tests.partition.ooc.test_out_of_core import _hetero, _homo, assert_same_folder

METHODS = ("random", "fennel", "coarsen")


def _cases(in_dir):
    for name, make in (("homo", _homo), ("hetero", _hetero)):
        for method in METHODS:
            yield f"{name}_{method}", make(), method
    yield "files_coarsen", in_dir, "coarsen"


def _run_all(out_root, in_dir, comm=None):
    for name, data, method in _cases(in_dir):
        OutOfCorePartitioner(data, 3, method, chunk_size=150, memory_budget="20KB", comm=comm).save(
            out_root / name, progress=False)


def _world_main(rank, world_size, out_root, in_dir):
    import torch.distributed as dist

    from pyg_dist.partition.ooc.comm import TorchComm
    dist.init_process_group("gloo")
    try:
        _run_all(out_root, in_dir, TorchComm())
    finally:
        dist.destroy_process_group()
    return rank


def test_two_ranks_write_the_single_process_folder(tmp_path):
    in_dir = tmp_path / "in"
    (in_dir / "edges").mkdir(parents=True)
    data = _homo(500, seed=4)
    ei = data.edge_index.numpy()
    for i, lo in enumerate(range(0, ei.shape[1], 1000)):  # chunk files of uneven length
        np.save(in_dir / "edges" / f"{i:03d}.npy", ei[:, lo:lo + 1000])
    for key in ("x", "y", "train_mask"):
        np.save(in_dir / f"{key}.npy", data[key].numpy())
    _run_all(tmp_path / "one", in_dir)
    assert spawn_world(2, _world_main, tmp_path / "two", in_dir, timeout=240) == [0, 1]
    for name, _, _ in _cases(in_dir):
        assert_same_folder(tmp_path / "one" / name, tmp_path / "two" / name)
        assert not list((tmp_path / "two").glob(f".{name}.tmp-*"))


def test_cli_under_torchrun_two_ranks(tmp_path):
    import os
    import subprocess
    import sys
    data = _homo(400, seed=5)
    (tmp_path / "in").mkdir()
    np.save(tmp_path / "in" / "edges.npy", data.edge_index.numpy())
    np.save(tmp_path / "in" / "y.npy", data.y.numpy())
    args = ["-m", "pyg_dist.partition.cli", "--dataset", "chunked", "--root", str(tmp_path / "in"), "--num-parts",
            "3", "--method", "fennel", "--chunk-size", "500", "--memory-budget", "40KB", "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, *args, "--out", str(tmp_path / "one")], env=env, capture_output=True,
                         text=True, timeout=120)
    assert one.returncode == 0, one.stderr
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          *args, "--out", str(tmp_path / "two")], env=env, capture_output=True, text=True, timeout=180)
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("edge cut") == 1  # the report comes from rank 0 only
    assert_same_folder(tmp_path / "one", tmp_path / "two")


def test_local_disks_each_rank_keeps_its_partitions(tmp_path):
    """Each rank in its own mount namespace with a private tmpfs at the output's parent (a machine's own
    disk): every rank writes META.json, the stamps and its partitions; rank 0 also the maps. Together the
    two folders are the single-process folder, and each loads its own partitions."""
    import os
    import shutil
    import subprocess
    import sys

    import pytest

    from pyg_dist.format import load_partition
    from pyg_dist.testing.world import free_port
    if shutil.which("unshare") is None:
        pytest.skip("no `unshare` command")
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs tmpfs {tmp_path}"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace: {probe.stderr.decode().strip()}")
    data = _homo(400, seed=7)
    (tmp_path / "in").mkdir()
    np.save(tmp_path / "in" / "edges.npy", data.edge_index.numpy())
    np.save(tmp_path / "in" / "y.npy", data.y.numpy())
    disk, port = tmp_path / "disk", free_port()
    disk.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    opts = ["--dataset", "chunked", "--root", str(tmp_path / "in"), "--num-parts", "3", "--method", "random",
            "--chunk-size", "700", "--quiet"]
    procs = []
    for rank in range(2):
        run = (f"mount -t tmpfs tmpfs {disk} && {sys.executable} -m torch.distributed.run --nnodes 2 "
               f"--nproc-per-node 1 --node-rank {rank} --master-addr 127.0.0.1 --master-port {port} "
               f"-m pyg_dist.partition.cli {' '.join(opts)} --out {disk}/out && cp -a {disk}/out {tmp_path}/rank{rank}")
        procs.append(subprocess.Popen(["unshare", "-m", "sh", "-c", run], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n=====\n".join(o[-3000:] for o in outs)
    assert not (disk / "out").exists()  # nothing reached the shared disk
    mine = {0: ["part_0", "part_2"], 1: ["part_1"]}
    for rank in range(2):
        root = tmp_path / f"rank{rank}"
        assert sorted(p.parent.name for p in root.glob("part_*/pyg_dist.json")) == ["part_0", "part_1", "part_2"]
        assert sorted(p.parent.name for p in root.glob("part_*/graph.pt")) == mine[rank]
        for p in mine[rank]:
            load_partition(root, int(p[-1]))
    assert not (tmp_path / "rank1" / "node_map.pt").exists() and (tmp_path / "rank0" / "node_map.pt").exists()
    merged = tmp_path / "merged"
    shutil.copytree(tmp_path / "rank0", merged)
    shutil.copytree(tmp_path / "rank1" / "part_1", merged / "part_1", dirs_exist_ok=True)
    from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner
    OutOfCorePartitioner(tmp_path / "in", 3, "random", chunk_size=700).save(tmp_path / "one", progress=False)
    assert_same_folder(tmp_path / "one", merged)
