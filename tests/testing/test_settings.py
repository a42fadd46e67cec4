"""The one configuration table (docs/reference/settings.md) agrees with the code: the page is fresh, every setting has a
documented meaning, every PYG_DIST_* variable the code names is registered (and only those), each registered
``field`` is a real setting; and the checks do fail on a drifted docstring or dataclass."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from pyg_dist.envvars import ENV_VARS, EnvVar, env_var
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.testing import load_script
from pyg_dist.testing import settings_table as st
from pyg_dist.train.session import TrainConfig

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "reference" / "settings.md"


# ------------------------------------------------------------------ (a) the page is the rendered page
def test_docs_page_is_fresh():
    assert PAGE.exists(), "run: python scripts/gen_settings.py"
    assert PAGE.read_text(encoding="utf-8") == st.render_page(), "docs/reference/settings.md is stale: " \
                                                                  "run python scripts/gen_settings.py"


def test_page_is_deterministic_and_lists_every_setting_and_variable():
    page = st.render_page()
    assert page == st.render_page()
    for d in st.DOCUMENTED:
        assert f"\n## {d.title}\n" in page
        for s in st.collect_settings(d.obj):
            assert f"| `{s.stars}{s.name}` |" in page
    for v in ENV_VARS:
        assert f"| `{v.name}` | `{v.type}` |" in page
    row = next(line for line in page.splitlines() if line.startswith("| `PYG_DIST_RPC_PORT`"))
    assert "| `TrainConfig.rpc_port` |" in row


def _gen_settings():
    return load_script(REPO / "scripts" / "gen_settings.py")


def test_gen_settings_check_passes_on_the_fresh_page_and_fails_on_a_stale_one(tmp_path, capsys):
    gen = _gen_settings()
    assert gen.main(["--check"]) == 0
    stale = tmp_path / "settings.md"
    stale.write_text(PAGE.read_text(encoding="utf-8").replace("| `rpc_port` |", "| `rpc_prt` |", 1))
    assert gen.main(["--check", "--out", str(stale)]) == 1
    out = capsys.readouterr()
    assert "-| `rpc_prt` |" in out.out and "+| `rpc_port` |" in out.out and "is stale" in out.err
    assert gen.main(["--out", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == PAGE.read_text(encoding="utf-8")


def test_gen_settings_runs_as_a_script():
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_settings.py"), "--check"], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# ------------------------------------------------------------------ (b) every setting is documented
@pytest.mark.parametrize("documented", st.DOCUMENTED, ids=lambda d: d.title)
def test_every_setting_has_a_meaning(documented):
    assert st.find_problems(documented.obj) == []
    assert all(s.meaning for s in st.collect_settings(documented.obj))


def test_partition_config_fields_are_all_partitioner_arguments():
    assert st.coverage_problems() == []


def test_types_and_defaults_come_from_the_code():
    by_name = {s.name: s for s in st.collect_settings(TrainConfig)}
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    assert list(by_name) == list(fields)
    assert by_name["partition_dir"].default is None  # required
    assert by_name["timeout"].default == repr(fields["timeout"].default)
    assert by_name["rpc_port"].type == "Optional[int]"
    loader = {s.name: s for s in st.collect_settings(st.DistNeighborLoader)}
    assert loader["kwargs"].stars == "**" and loader["kwargs"].default is None
    assert loader["seed_split"].default == "'balanced'"


# ------------------------------------------------------------------ (c) the variables the code names
def test_every_variable_in_the_code_is_registered_and_every_registered_one_is_read():
    in_code = st.env_names_in_code()
    assert in_code, "the scan found no PYG_DIST_* literal at all"
    assert st.env_problems() == []
    # The scan itself, independently: a plain regex over the sources, the registry left out.
    names = set()
    for path in (REPO / "src" / "pyg_dist").rglob("*.py"):
        if path.name != "envvars.py" or path.parent.name != "pyg_dist":
            names |= set(re.findall(r"PYG_DIST_[A-Z_]+", path.read_text(encoding="utf-8")))
    assert names == set(in_code) == {v.name for v in ENV_VARS}


def test_registry_is_sorted_unique_and_typed():
    names = [v.name for v in ENV_VARS]
    assert names == sorted(set(names))
    assert len(ENV_VARS) == 17
    assert all(isinstance(v, EnvVar) for v in ENV_VARS)


# ------------------------------------------------------------------ (d) the fields the variables back
def test_each_field_names_a_real_setting():
    assert st.field_problems() == []
    backed = {v.name: v.field for v in ENV_VARS if v.field}
    assert backed == {"PYG_DIST_RPC_PORT": "TrainConfig.rpc_port",
                      "PYG_DIST_FAILURE_TIMEOUT": "TrainConfig.failure_timeout",
                      "PYG_DIST_TRANSPORT": "TrainConfig.transport",
                      "PYG_DIST_WIRE_PROTECTION": "TrainConfig.wire_protection"}
    for name in backed.values():
        owner, _, field = name.partition(".")
        assert owner == "TrainConfig" and field in {f.name for f in dataclasses.fields(TrainConfig)}
    for var in ENV_VARS:  # the precedence is stated
        if var.field:
            assert f"{var.field}`" in var.meaning and "wins" in var.meaning


# ------------------------------------------------------------------ (e) the checks can fail
def test_parser_handles_combined_keys_continuations_and_kwargs():
    doc = """Summary line.

    More text: with a colon, not an entry.

    Args:
        a, b, c: Three at once,
            continued here.
        d / e: Two at once.
        f:
            Meaning on the next line.
        g: One (``x``: not a key).
        *args: Positional extras.
        **kwargs: ``DataLoader`` arguments
            (``batch_size``, ...).

    Example:
        >>> h: int = 1
    """
    assert st.parse_args(doc) == {
        "a": "Three at once, continued here.", "b": "Three at once, continued here.",
        "c": "Three at once, continued here.", "d": "Two at once.", "e": "Two at once.",
        "f": "Meaning on the next line.", "g": "One (``x``: not a key).", "args": "Positional extras.",
        "kwargs": "``DataLoader`` arguments (``batch_size``, ...).",
    }
    assert st.parse_args("No sections here.") == {}
    assert st.parse_args(None) == {}


@dataclass(frozen=True)
class _Tiny:
    """A tiny config.

    Args:
        size: Documented.
        gone: Documented, but no field any more.
    """
    size: int = 1
    fresh: Optional[float] = None


class _TinyInit:
    """A tiny class.

    Args:
        a / b: Both.
    """

    def __init__(self, a, b: int = 2, *, c=None, **kwargs):
        pass


def test_problem_finder_reports_an_undocumented_field_and_a_stale_entry():
    assert st.find_problems(_Tiny) == ["_Tiny.fresh: no meaning in the Args: section of _Tiny's docstring",
                                       "_Tiny: Args: documents 'gone', which is no parameter"]
    settings = st.collect_settings(_Tiny)
    assert [(s.name, s.type, s.default, s.meaning) for s in settings] == [
        ("size", "int", "1", "Documented."), ("fresh", "Optional[float]", "None", "")]
    problems = st.find_problems(_TinyInit)
    assert problems == ["_TinyInit.c: no meaning in the Args: section of _TinyInit's docstring",
                        "_TinyInit.kwargs: no meaning in the Args: section of _TinyInit's docstring"]
    with pytest.raises(InvalidArgumentError, match="_Tiny.fresh"):
        st.render_page([st.Documented(_Tiny, "A tiny config.")], ENV_VARS)


def test_coverage_and_field_checks_fail_on_drift():
    @dataclass(frozen=True)
    class Config:
        size: int = 1
        hidden: int = 0

    only = [st.Documented(_TinyInit, "x", Config, ("size",))]
    assert st.coverage_problems(only) == ["Config.hidden: no argument of _TinyInit"]
    wrong = EnvVar("PYG_DIST_RPC_PORT", "int", "1", "x", field="TrainConfig.rpc_prt")
    assert st.field_problems([wrong]) == ["PYG_DIST_RPC_PORT: backs TrainConfig.rpc_prt, which is no setting "
                                          "of a documented object"]


def test_env_scan_fails_on_an_unregistered_and_an_unread_variable(tmp_path):
    (tmp_path / "a.py").write_text('X = "PYG_DIST_BACKEND"  # and PYG_DIST_NEW_KNOB in a comment\n')
    assert st.env_names_in_code(tmp_path) == {"PYG_DIST_BACKEND": ["a.py"], "PYG_DIST_NEW_KNOB": ["a.py"]}
    problems = st.env_problems(tmp_path, [env_var("PYG_DIST_BACKEND"), env_var("PYG_DIST_DATA")])
    assert problems == ["PYG_DIST_NEW_KNOB: named in a.py but not in pyg_dist.envvars.ENV_VARS",
                        "PYG_DIST_DATA: in ENV_VARS but named nowhere in the code"]


def test_registry_entries_are_validated():
    with pytest.raises(InvalidArgumentError, match="name"):
        EnvVar("DIST_RPC_PORT", "int", "1", "x")
    with pytest.raises(InvalidArgumentError, match="field"):
        EnvVar("PYG_DIST_RPC_PORT", "int", "1", "x", field="rpc_port")
    with pytest.raises(InvalidArgumentError, match="meaning"):
        EnvVar("PYG_DIST_RPC_PORT", "int", "1", "")
    with pytest.raises(InvalidArgumentError, match="PYG_DIST_NOPE"):
        env_var("PYG_DIST_NOPE")


def test_markdown_cells():
    assert st.to_markdown(":class:`~pyg_dist.a.B` and :mod:`pyg_dist.c` take ``x | y``") == \
        "`B` and `pyg_dist.c` take `x \\| y`"


# ------------------------------------------------------------------ (d) the environment is read in one module
def _environ_uses(root: Path) -> list:
    """``file:line`` of every ``os.environ`` / ``os.getenv`` in code (not in strings or comments) under ``root``,
    the registry module left out."""
    import io
    import tokenize
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "envvars.py" and path.parent.name == "pyg_dist":
            continue
        toks = [t for t in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
                if t.type in (tokenize.NAME, tokenize.OP)]
        for a, b, c in zip(toks, toks[1:], toks[2:]):
            if a.string == "os" and b.string == "." and c.string in ("environ", "getenv", "putenv", "unsetenv"):
                found.append(f"{path.relative_to(root)}:{a.start[0]}")
    return found


def test_no_module_but_envvars_touches_the_environment(tmp_path):
    assert _environ_uses(REPO / "src" / "pyg_dist") == []
    (tmp_path / "m.py").write_text('"""os.environ in a docstring is fine."""\nimport os\nX = os.environ.get("RANK")\n')
    assert _environ_uses(tmp_path) == ["m.py:3"]  # the scan does see a read


def test_raw_reads_listed_variables_only():
    from pyg_dist import envvars
    assert envvars.raw("RANK", {"RANK": "2"}) == "2" and envvars.raw("PYG_DIST_DATA", {}, "x") == "x"
    with pytest.raises(InvalidArgumentError, match="PYG_DIST_NOT_A_KNOB"):
        envvars.raw("PYG_DIST_NOT_A_KNOB", {})
    with pytest.raises(InvalidArgumentError, match="HOME"):
        envvars.is_set("HOME")


@pytest.mark.parametrize("text,zero,want", [("", False, 7.0), (" 64 ", False, 64.0), ("0", True, 0.0),
                                             ("0", False, None), ("-1", False, None), ("nan", False, None),
                                             ("inf", False, None), ("abc", True, None)])
def test_read_number(text, zero, want):
    from pyg_dist import envvars
    env = {"PYG_DIST_BUFFER_POOL_MB": text}
    if want is None:
        with pytest.raises(InvalidArgumentError, match=r"\$PYG_DIST_BUFFER_POOL_MB"):
            envvars.read_number("PYG_DIST_BUFFER_POOL_MB", 7.0, env, allow_zero=zero)
    else:
        assert envvars.read_number("PYG_DIST_BUFFER_POOL_MB", 7.0, env, allow_zero=zero) == want


def test_read_port():
    from pyg_dist import envvars
    assert envvars.read_port("PYG_DIST_RPC_PORT", {}) is None
    assert envvars.read_port("PYG_DIST_RPC_PORT", {"PYG_DIST_RPC_PORT": "29600"}) == 29600
    for bad in ("x", "0", "65536"):
        with pytest.raises(InvalidArgumentError, match="PYG_DIST_RPC_PORT"):
            envvars.read_port("PYG_DIST_RPC_PORT", {"PYG_DIST_RPC_PORT": bad})


def test_hand_down_and_hidden_write_only_what_they_say(monkeypatch):
    from pyg_dist import envvars
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    envvars.hand_down("GLOO_SOCKET_IFNAME", "lo", to="gloo")
    assert envvars.raw("GLOO_SOCKET_IFNAME") == "lo"
    envvars.hand_down("GLOO_SOCKET_IFNAME", "eth0", to="gloo", keep_set=True)  # the value already set wins
    assert envvars.raw("GLOO_SOCKET_IFNAME") == "lo"
    with envvars.hidden("GLOO_SOCKET_IFNAME", why="a test"):
        assert not envvars.is_set("GLOO_SOCKET_IFNAME")
    assert envvars.raw("GLOO_SOCKET_IFNAME") == "lo"
    with pytest.raises(InvalidArgumentError, match="PATH"):
        envvars.hand_down("PATH", "/x", to="nobody")
