#!/usr/bin/env bash
# The pure-torch fallback, for real: a fresh venv (.venv-torch, gitignored) from which numba is
# uninstalled after the normal install, then a fast test subset under PYG_DIST_BACKEND=torch that
# covers ops, partition, stores, the samplers and one loader (the multi-process examples are left
# out). Prints every test that ran. Extra arguments go to pytest.
#
#   scripts/ci_torch_backend.sh            # about 1.5 minutes on 2 cores, plus the venv install
#   scripts/ci_torch_backend.sh prepare    # only the venv (.ci/run builds it while its checks run)
#   scripts/ci_torch_backend.sh test       # only the tests, in the venv prepare built
set -euo pipefail
cd "$(dirname "$0")/.."
STEP=both
case "${1:-}" in prepare|test) STEP=$1; shift ;; esac

VENV=.venv-torch
TESTS=(
    tests/ops/test_backend_switch.py             # the switch, torch twins vs oracles, imports without numba
    tests/ops/test_kernel.py                     # ops: one-hop kernel and relabeler invariants
    tests/ops/test_buffers.py                    # ops.rows, partition book routing, store buffers
    tests/partition/test_partition.py            # partitioner (metis / random / supernode), round trips
    tests/partition/test_partition_cli.py        # the CLI, symmetric_csr / relabel_csc oracles
    tests/partition/test_partition_errors.py
    tests/partition/ooc/test_out_of_core.py      # out-of-core partitioner == the in-memory one (torch relabel)
    tests/format/test_schema.py                  # every writer saves schema entries, every reader reads them
    tests/store/test_store.py                    # local graph / feature stores
    tests/store/test_store_world.py              # remote lookups routed by the partition book (2 spawned ranks)
    tests/sampler/test_neighbor_sampler.py       # one-process sampler vs k_hop_subgraph
    tests/sampler/test_link_seeds.py             # edge seeds, negative sampling
    tests/sampler/test_dist_sampler.py           # distributed sampler, one process
    tests/sampler/test_dist_sampler_world.py     # distributed sampling in spawned worlds
    tests/loader/test_loader_node.py             # one loader (num_workers 0 and 2)
    tests/embedding/test_embedding_world.py      # sparse optimizers' torch update path vs torch.optim
)

if [ "$STEP" != test ]; then
    rm -rf "$VENV"
    python -m venv "$VENV"
    "$VENV/bin/pip" install -q torch==2.13.0
    "$VENV/bin/pip" install -q -e ".[test]"
    "$VENV/bin/pip" uninstall -y -q numba llvmlite
fi
[ "$STEP" = prepare ] && { echo "ci_torch_backend: $VENV prepared"; exit 0; }
[ -x "$VENV/bin/python" ] || { echo "ci_torch_backend: no $VENV: run '$0 prepare' first" >&2; exit 1; }
. "$VENV/bin/activate"
if python -c "import numba" 2>/dev/null; then
    echo "ci_torch_backend: numba is still importable in $VENV" >&2
    exit 1
fi

export PYG_DIST_BACKEND=torch
echo "ci_torch_backend: PYG_DIST_BACKEND=$PYG_DIST_BACKEND, numba not installed; running ${#TESTS[@]} files"
python -m pytest -p no:cacheprovider -v -rs "${TESTS[@]}" "$@"
