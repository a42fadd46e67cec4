"""Suite-wide set-up: compile (or load) numba's kernel cache once in the main process, so spawned
ranks and DataLoader workers load it instead of all compiling it at the same time on a cold clone; under
pytest-xdist the controller compiles it before its test processes start."""
import pytest


def pytest_configure(config):
    """pytest-xdist's controller (``-n N``, not a test process itself) fills numba's cache before it starts the
    test processes, which then load it (each also runs ``_warm_numba_cache``)."""
    if getattr(config, "workerinput", None) is None and config.pluginmanager.hasplugin("xdist") \
            and config.getoption("numprocesses", None):
        from pyg_dist.ops import warmup
        warmup()


@pytest.fixture(scope="session", autouse=True)
def _warm_numba_cache():
    from pyg_dist.ops import warmup
    warmup()
    yield


@pytest.fixture(autouse=True)
def _restore_environment():
    """Each test leaves the process environment as it found it. pyg_dist hands variables down to the processes it
    starts (``GLOO_SOCKET_IFNAME``, ``MASTER_ADDR``, ...: ``envvars.hand_down``), so a test that joins a world in
    this process would otherwise pass them on to every later test's jobs, which copy ``os.environ``."""
    import os
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


def _required_modules() -> set:
    """Top-level modules of pyg-dist's own requirements and its ``test`` extra (what the README's test command
    installs), by distribution name (``pyg-dist`` installed, editable or not)."""
    import re
    from importlib import metadata
    try:
        reqs = metadata.requires("pyg-dist") or []
    except metadata.PackageNotFoundError:
        return set()
    names = set()
    for req in reqs:
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", req)
        if extra is None or extra.group(1) == "test":
            names.add(re.split(r"[\s\[<>=!~;]", req.strip(), maxsplit=1)[0].lower().replace("-", "_"))
    return names


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test skipped because a module that ``.[test]`` installs could not be imported fails instead: every test
    the README's command collects runs with what it installs (the numba-less job, ``PYG_DIST_BACKEND=torch``,
    skips numba's own comparisons on purpose)."""
    import os
    import re
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return
    missing = re.search(r"could not import '([\w.]+)'", str(report.longrepr[2]))
    if missing is None:
        return
    module = missing.group(1).split(".")[0].lower()
    if module in ("numba", "llvmlite") and os.environ.get("PYG_DIST_BACKEND") == "torch":
        return
    if module in _required_modules():
        report.outcome = "failed"
        report.longrepr = (f"skipped for want of {module!r}, which the README's test install (.[test]) installs: "
                           f"{report.longrepr[2]}")
