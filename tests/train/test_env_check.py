"""Settings fail at start-up: every registered PYG_DIST_* variable with a bad value makes dist_session raise
the InvalidArgumentError naming that variable and value before the process group forms (issue item 10)."""
from __future__ import annotations

import warnings

import pytest

import pyg_dist
from pyg_dist.envvars import ENV_VARS
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.partition import Partitioner
from pyg_dist.train import env_check, session, startup

#: One value each variable's reader must refuse. A variable added to the registry without one fails
#: test_every_registered_variable_has_a_bad_value_and_a_reader: add both (here and in env_check.READERS).
BAD = {
    "PYG_DIST_BACKEND": "numba-please",
    "PYG_DIST_BUFFER_POOL_MB": "lots",
    "PYG_DIST_DATA": __file__,  # a file, not a folder
    "PYG_DIST_FAILURE_TIMEOUT": "soon",
    "PYG_DIST_FRAME_MAX_MB": "-1",
    "PYG_DIST_IFNAME": "nosuchif9",
    "PYG_DIST_MALLOC_TUNING": "maybe",
    "PYG_DIST_REPLY_MAX_MB": "0",
    "PYG_DIST_RPC_PORT": "70000",
    "PYG_DIST_RPC_TRANSPORTS": "carrier-pigeon",
    "PYG_DIST_SECRET_FILE": "/nonexistent/pyg_dist/secret",
    "PYG_DIST_SERVE_BUDGET_MB": "abc",
    "PYG_DIST_TENSORPIPE_TRANSPORTS": "semaphore",
    "PYG_DIST_TRACEBACK": "yes",
    "PYG_DIST_TRANSPORT": "smoke-signals",
    "PYG_DIST_WIRE_PROTECTION": "rot13",
    "PYG_DIST_WORLD_WARM": "lukewarm",
}
NAMES = [v.name for v in ENV_VARS]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("envcheck") / "p1"
    Partitioner(pyg_dist.synthetic_graph(60, 4, num_features=4, seed=0), 1, method="random").save(out, progress=False)
    return out


@pytest.fixture
def clean_env(monkeypatch):
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_every_registered_variable_has_a_bad_value_and_a_reader():
    assert sorted(BAD) == sorted(NAMES)
    assert sorted(env_check.READERS) == sorted(NAMES)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", NAMES)
def test_a_bad_variable_fails_dist_session_before_the_process_group(folder, clean_env, name):
    formed = []
    clean_env.setattr(startup, "join_world_group", lambda *a, **k: formed.append(a))
    clean_env.setenv(name, BAD[name])
    deprecated = pytest.warns(DeprecationWarning, match=f"{name} is deprecated") if name == "PYG_DIST_RPC_TRANSPORTS" \
        else warnings.catch_warnings()                                # the old name says so, as it is read
    with deprecated, pytest.raises(InvalidArgumentError) as info:
        with session.dist_session(session.TrainConfig(str(folder), rpc=False, timeout=30)):
            pass
    text = str(info.value)
    assert name in text and repr(BAD[name]) in text, text
    assert formed == []                                             # nothing formed, nothing to tear down


def test_good_values_and_unset_pass(clean_env, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s" * 32)
    secret.chmod(0o600)
    good = {"PYG_DIST_BACKEND": "torch", "PYG_DIST_BUFFER_POOL_MB": "0", "PYG_DIST_DATA": str(tmp_path),
            "PYG_DIST_FAILURE_TIMEOUT": "7.5", "PYG_DIST_FRAME_MAX_MB": "64", "PYG_DIST_IFNAME": "lo",
            "PYG_DIST_MALLOC_TUNING": "Off", "PYG_DIST_REPLY_MAX_MB": "8", "PYG_DIST_RPC_PORT": "29999",
            "PYG_DIST_RPC_TRANSPORTS": "uv,shm", "PYG_DIST_SECRET_FILE": str(secret),
            "PYG_DIST_SERVE_BUDGET_MB": "16", "PYG_DIST_TENSORPIPE_TRANSPORTS": "uv", "PYG_DIST_TRACEBACK": "1",
            "PYG_DIST_TRANSPORT": "tensorpipe",
            "PYG_DIST_WIRE_PROTECTION": "encrypt", "PYG_DIST_WORLD_WARM": "0"}
    assert sorted(good) == sorted(NAMES)
    env_check.validate_env()                                        # all unset: the defaults
    for name, value in good.items():
        clean_env.setenv(name, value)
    env_check.validate_env()


def test_a_setting_the_config_gives_wins_over_its_bad_variable(clean_env):
    clean_env.setenv("PYG_DIST_TRANSPORT", BAD["PYG_DIST_TRANSPORT"])
    clean_env.setenv("PYG_DIST_RPC_PORT", BAD["PYG_DIST_RPC_PORT"])
    cfg = session.TrainConfig("/x", transport="sockets", rpc_port=29700)
    assert env_check.overridden(cfg) == {"PYG_DIST_TRANSPORT", "PYG_DIST_RPC_PORT"}
    env_check.validate_env(skip=env_check.overridden(cfg))
    with pytest.raises(InvalidArgumentError, match="PYG_DIST_RPC_PORT"):
        env_check.validate_env(skip=env_check.overridden(session.TrainConfig("/x", transport="sockets")))


def test_flag_and_port_readers():
    from pyg_dist.context import env_rpc_port
    from pyg_dist.envvars import read_flag
    flag = "PYG_DIST_MALLOC_TUNING"
    assert [read_flag(flag, d, {flag: v}) for d, v in
            [(True, ""), (False, ""), (True, "no"), (False, "ON")]] == [True, False, False, True]
    with pytest.raises(InvalidArgumentError, match=r"\$PYG_DIST_MALLOC_TUNING.*'2'"):
        read_flag(flag, True, {flag: "2"})
    assert env_rpc_port({"PYG_DIST_RPC_PORT": "1"}) == 1
    for bad in ("0", "65536", "x"):
        with pytest.raises(InvalidArgumentError, match="PYG_DIST_RPC_PORT"):
            env_rpc_port({"PYG_DIST_RPC_PORT": bad})


def test_the_old_tensorpipe_transports_name_is_read_with_a_deprecation_line(clean_env):
    from pyg_dist.rpc.settings import tensorpipe_transports
    assert tensorpipe_transports() == ["uv"]                        # neither set
    clean_env.setenv("PYG_DIST_RPC_TRANSPORTS", "uv,shm")
    with pytest.warns(DeprecationWarning, match="PYG_DIST_RPC_TRANSPORTS is deprecated: set "
                                                "PYG_DIST_TENSORPIPE_TRANSPORTS"):
        assert tensorpipe_transports() == ["uv", "shm"]
    clean_env.setenv("PYG_DIST_TENSORPIPE_TRANSPORTS", "default")   # the new name wins, silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tensorpipe_transports() is None
