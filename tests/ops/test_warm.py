"""pyg-dist-warmup: compiles (or loads) every numba kernel, names the cache, prints the version.

That a fresh cache filled by the command leaves the demo nothing to compile is checked on the installed wheel
by ``scripts/wheel_smoke.sh`` (in ``.ci/run``)."""
import pytest

import pyg_dist
from pyg_dist.ops import warm
from pyg_dist.ops.backend import numba_available


def test_version_flag_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exc:
        warm.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"pyg-dist-warmup {pyg_dist.__version__}"


@pytest.mark.skipif(not numba_available(), reason="numba is not installed: nothing to warm")
def test_warm_names_the_folders_that_hold_every_kernel(capsys):
    assert warm.main([]) == 0
    out = capsys.readouterr().out
    folders = warm.cache_folders()
    assert folders and all(str(f) in out for f in folders)
    # every compiled kernel of pyg_dist has an index file in one of them, after the warm-up
    from pyg_dist.ops import _numba_csr, _numba_optim, _numba_quant, _numba_sample
    for kernel in (_numba_csr._relabel_csc, _numba_optim.adam_rows, _numba_quant.quantise_rows,
                   _numba_sample.sample_kernel):
        assert kernel.signatures, kernel  # compiled (or loaded) for at least one signature
        index = kernel._cache._cache_file._index_path
        assert any(str(f) in index for f in folders), index
