"""pyg_dist.train.session: validated config, and a rank killed mid-epoch stops the others with a clear error."""
from __future__ import annotations

import os
import time

import pytest

import pyg_dist
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.partition import Partitioner
from pyg_dist.testing import spawn_world
from pyg_dist.train.session import TrainConfig


@pytest.mark.parametrize("field,value", [("num_workers", -1), ("backend", "mpi"), ("timeout", 0),
                                         ("call_timeout", "1"), ("mmap", 1), ("partition_dir", "")])
def test_config_rejects_bad_values(field, value):
    kwargs = {"partition_dir": "/tmp/x", field: value}
    with pytest.raises(InvalidArgumentError, match=field):
        TrainConfig(**kwargs)


def test_session_rejects_non_config():
    from pyg_dist.train.session import dist_session
    with pytest.raises(InvalidArgumentError, match="config"):
        with dist_session("/tmp/x"):
            pass


def _train_until_killed(rank, world_size, root, stamp, workers):
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import all_sum, dist_session

    try:
        with dist_session(TrainConfig(root, num_workers=workers, timeout=60, call_timeout=20)) as env:
            loader = DistNeighborLoader(env, [5, 5], input_nodes="train_mask", batch_size=16, shuffle=True,
                                        num_workers=workers)
            steps = 0
            for _ in range(1000):
                for _batch in loader:
                    all_sum([1.0], env)                  # the DDP-like collective of a training step
                    steps += 1
                    if rank == 1 and steps == 3:
                        with open(stamp, "w") as fh:
                            fh.write(repr(time.time()))
                        os._exit(3)                      # dies without any goodbye
    except Exception as exc:  # noqa: BLE001 -- what the survivor sees (after teardown) is the result
        return type(exc).__name__, str(exc)[:2000], time.time()
    return "no error", "", time.time()


@pytest.mark.timeout(150)
@pytest.mark.parametrize("workers", [0, 2])
def test_killed_rank_stops_the_others_within_30s(tmp_path, workers):
    data = pyg_dist.synthetic_graph(800, 8, num_features=8, seed=4)
    root = tmp_path / "k2"
    Partitioner(data, 2, method="random").save(root, progress=False)
    stamp = str(tmp_path / "died")
    results = spawn_world(2, _train_until_killed, str(root), stamp, workers, timeout=120, may_die=[1])
    kind, message, when = results[0]
    died = float(open(stamp).read())
    assert kind != "no error", "the survivor trained on without noticing"
    assert when - died < 30, (kind, message, when - died)
    # names who is gone (a sampling call), or says a peer is gone (gloo, when the collective notices first)
    assert any(k in message for k in ("partition 1", "rank 1", "peer")), message
    assert results[1] is None
