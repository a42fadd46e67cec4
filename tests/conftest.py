"""Suite-wide set-up: compile (or load) numba's kernel cache once in the main process, so spawned
ranks and DataLoader workers load it instead of all compiling it at the same time on a cold clone."""
import pytest


@pytest.fixture(scope="session", autouse=True)
def _warm_numba_cache():
    from pyg_dist.ops import warmup
    warmup()
    yield
