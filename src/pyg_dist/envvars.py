"""The environment, read and written in one place: every ``PYG_DIST_*`` variable pyg_dist reads (its type,
default, meaning and the setting it backs), the launcher's and the system's variables it reads, and the readers.

No other module touches ``os.environ``: each reads a variable through :func:`raw` (or a typed reader here:
:func:`read_flag`, :func:`read_choice`, :func:`read_folder`, :func:`read_number`, :func:`read_port`), which
refuses a name this module does not list, so an unlisted variable cannot be read anywhere. A ``PYG_DIST_*``
variable is parsed where it acts (the module named in its meaning), with one of those readers;
:func:`pyg_dist.train.env_check.validate_env` runs every variable's parser when ``dist_session()`` starts, before
the process group forms, so a bad value fails at start-up with an ``InvalidArgumentError`` naming the variable and
the value. The environment is written only by :func:`hand_down` and :func:`hidden`, each call naming who reads
the value after it (a child process, or a library that reads its own variables), where a process boundary needs
it. ``tests/testing/test_settings.py`` checks that the code mentions no ``PYG_DIST_*`` variable this table
lacks and no ``os.environ`` outside this module; ``docs/reference/settings.md`` shows the table beside the
settings of the configuration objects (``scripts/gen_settings.py``).

A variable that backs a setting (``field``, ``Object.parameter``) is that setting's default: the setting,
when given, wins.

Example:
    >>> env_var("PYG_DIST_RPC_PORT").field
    'TrainConfig.rpc_port'
    >>> [v.name for v in ENV_VARS] == sorted(v.name for v in ENV_VARS)
    True
    >>> read_number("PYG_DIST_SERVE_BUDGET_MB", 512.0, {"PYG_DIST_SERVE_BUDGET_MB": "64"})
    64.0
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import re
from dataclasses import dataclass
from typing import Iterator, Mapping, Optional, Tuple

from pyg_dist.errors import InvalidArgumentError

LOG = logging.getLogger("pyg_dist")
_NAME = re.compile(r"PYG_DIST_[A-Z_]+")
_FIELD = re.compile(r"[A-Za-z_]\w*\.[A-Za-z_]\w*")


@dataclass(frozen=True)
class EnvVar:
    """One environment variable.

    Args:
        name: The variable, ``PYG_DIST_...``.
        type: What its value is read as (``int``, ``float``, ``str``, ``path``, ``flag``).
        default: What holds when it is unset (a value, or where the value then comes from; Markdown).
        meaning: What it does, which module reads it and when, and which way precedence goes (Markdown:
            code in backticks, as ``docs/reference/settings.md`` shows it).
        field: The setting it backs, ``Object.parameter`` (the setting wins when given); ``None`` if none.
    """
    name: str
    type: str
    default: str
    meaning: str
    field: Optional[str] = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise InvalidArgumentError("EnvVar", "name", self.name, "a name PYG_DIST_[A-Z_]+")
        for arg in ("type", "default", "meaning"):
            if not isinstance(getattr(self, arg), str) or not getattr(self, arg):
                raise InvalidArgumentError("EnvVar", arg, getattr(self, arg), "a non-empty str")
        if self.field is not None and (not isinstance(self.field, str) or not _FIELD.fullmatch(self.field)):
            raise InvalidArgumentError("EnvVar", "field", self.field, "None or 'Object.parameter'")


#: Every variable, sorted by name.
ENV_VARS: Tuple[EnvVar, ...] = (
    EnvVar(
        "PYG_DIST_BACKEND", "str", "`auto` (also when empty)",
        "Sampling-kernel switch, read at every kernel call (`pyg_dist.ops.backend`), so child processes follow "
        "their own environment. `auto`: numba for CPU tensors when it imports, else the torch kernels. `torch`: "
        "behave exactly as if numba were not installed (numba is not imported; `backend='numba'` raises). Any "
        "other value raises `InvalidArgumentError` naming the variable."),
    EnvVar(
        "PYG_DIST_BUFFER_POOL_MB", "float", "`1024`",
        "Bound, in MiB, of the per-process pool of recycled large gather buffers (`pyg_dist.store.buffers`), "
        "read once when that module is imported; `0` turns pooling off; a value that is no number >= 0 raises "
        "`InvalidArgumentError`. `set_buffer_pool_limit()` overrides it later in the process."),
    EnvVar(
        "PYG_DIST_DATA", "path", "`$XDG_CACHE_HOME/pyg_dist/data`, else `~/.cache/pyg_dist/data`",
        "Folder of shared real data (Planetoid raw files, ...) that `load_planetoid()` reads when it is given "
        "no `root` (`pyg_dist.datasets.planetoid.shared_data_root`); an explicit `root` wins; empty counts as "
        "unset. `dist_session()` checks at start-up that a set value does not name a file "
        "(`InvalidArgumentError` naming the variable); a folder that does not exist is no error there."),
    EnvVar(
        "PYG_DIST_FAILURE_TIMEOUT", "float", "`20`",
        "The failure bound in seconds after start-up (`pyg_dist.timeouts`): remote calls, collectives and the "
        "shutdown barrier fail within it; also the default of the remote-call timeouts "
        "(`TrainConfig.call_timeout`, the loaders' `timeout`) and of `TMAConfig.timeout`. "
        "`TrainConfig.failure_timeout`, when set, wins: `dist_session()` writes it into this variable, so "
        "sampler workers inherit it. Not a number > 0: `InvalidArgumentError`.",
        field="TrainConfig.failure_timeout"),
    EnvVar(
        "PYG_DIST_FRAME_MAX_MB", "float", "`1024`",
        "Most MiB of tensor bytes in one frame of the `sockets` transport "
        "(`pyg_dist.rpc.settings.frame_max_bytes`), read at each frame: a peer's frame that announces more is "
        "refused before anything is allocated (`FrameError` naming "
        "the peer and the field; that connection closes, the process carries on). Give every process the same "
        "value, at least `PYG_DIST_REPLY_MAX_MB`. Not a number > 0: `InvalidArgumentError` naming the variable."),
    EnvVar(
        "PYG_DIST_IFNAME", "str", "unset: the interface that reaches `MASTER_ADDR`",
        "Network interface every pyg_dist listener binds (`pyg_dist.iface`): the rendezvous stores pyg_dist "
        "hosts listen on its IPv4 address, and TensorPipe / gloo get it as `TP_SOCKET_IFNAME` / "
        "`GLOO_SOCKET_IFNAME` unless those are set (they win). An interface without an IPv4 address raises "
        "`InvalidArgumentError` naming the variable."),
    EnvVar(
        "PYG_DIST_MALLOC_TUNING", "flag", "`1` (on)",
        "glibc allocator tuning (`pyg_dist._alloc.tune_allocator`: mmap threshold 32 MiB, trim threshold "
        "256 MiB, one arena; and `THP_MEM_ALLOC_ENABLE=1` unless set: torch backs tensors of 2 MiB and more "
        "with transparent huge pages; torch reads it at its first such allocation, which `import torch_geometric` "
        "already makes, so launch with it set: rank 0 warns when it came too late), applied once per process when "
        "`dist_session()` or a sampler worker starts; `0`, "
        "`false`, `no` or `off` keep the allocator's defaults, `1`, `true`, `yes` or `on` (any case) apply them; "
        "anything else raises `InvalidArgumentError` naming the variable."),
    EnvVar(
        "PYG_DIST_REPLY_MAX_MB", "float", "`256`",
        "Most MiB of one reply a process serves: a feature lookup's rows, or a one-hop sample's edges (16 bytes "
        "per edge, bounded before sampling by seeds x fanout; `pyg_dist.store.limits`), read at each request sent "
        "and served: a requester splits its requests so that no reply exceeds it (one-hop requests by seeds, "
        "and with replacement by draws: the same sample), an owner refuses a larger one "
        "(`ServingLimitError`, raised by the requester as `RemoteCallError` naming the peer, the size and this "
        "variable); a single row, one seed's sample without replacement or a single draw is still served. Give "
        "every process the same value. Not a number > 0: `InvalidArgumentError` naming the variable."),
    EnvVar(
        "PYG_DIST_RPC_PORT", "int", "`MASTER_PORT + 1`",
        "RPC's own rendezvous port (`pyg_dist.context.DistContext.from_env`); never `MASTER_PORT`, which is "
        "DDP's. `TrainConfig.rpc_port` (or `DistContext.from_env(rpc_port=...)`), when set, wins; empty counts "
        "as unset. The loaders' worker worlds rendezvous on the resolved port + loader index unless their "
        "`rpc_port` is given. Not an integer: `InvalidArgumentError`.",
        field="TrainConfig.rpc_port"),
    EnvVar(
        "PYG_DIST_RPC_TRANSPORTS", "str", "unset",
        "Deprecated: the old name of `PYG_DIST_TENSORPIPE_TRANSPORTS` (it read like `PYG_DIST_TRANSPORT`); "
        "read, with a `DeprecationWarning`, only when the new name is unset."),
    EnvVar(
        "PYG_DIST_SECRET_FILE", "path", "unset: key agreement alone",
        "File holding the job's secret for the `sockets` transport (`pyg_dist.rpc.settings.file_secret`), read at "
        "`init_rpc`: a regular file of at least 16 bytes, readable by its owner only (mode 0600; a FIFO, a folder "
        "or a looser "
        "mode: `InvalidArgumentError` naming the file). It is mixed into every connection's key and signs every "
        "listener entry a process publishes in the rendezvous store, so someone who can write that store but not "
        "read the file can neither forge an entry (`TamperedStoreError` at start-up) nor relay a connection. "
        "Unset: every process's X25519 key pair alone, which stops strangers and store readers but not a store "
        "writer. Give every process of the job the same file."),
    EnvVar(
        "PYG_DIST_SERVE_BUDGET_MB", "float", "`512`",
        "Most MiB of replies (feature lookups and one-hop samples) one process serves at once "
        "(`pyg_dist.store.limits`), read at each "
        "request served: a request waits, first come first served, until its reply fits beside those still "
        "being sent (one larger than the budget is served alone), at most its call's timeout (default: "
        "`PYG_DIST_FAILURE_TIMEOUT`), then `ServingLimitError` naming this variable. Per process: each "
        "sampler worker that serves has its own. Not a number > 0: `InvalidArgumentError` naming the variable."),
    EnvVar(
        "PYG_DIST_TENSORPIPE_TRANSPORTS", "str", "`uv`",
        "With `PYG_DIST_TRANSPORT=tensorpipe` only: TensorPipe's own transports under the RPC world "
        "(`pyg_dist.rpc.settings.tensorpipe_transports`), read at `init_rpc`: a comma list of "
        "`uv`, `shm`, `ibv`, or `default` for TensorPipe's own choice (its shared-memory transport "
        "busy-polls); anything else raises `InvalidArgumentError`. Formerly `PYG_DIST_RPC_TRANSPORTS` (still read "
        "when this one is unset, with a `DeprecationWarning`)."),
    EnvVar(
        "PYG_DIST_TRACEBACK", "flag", "unset (one line per error)",
        "Exactly `1`: `run_main()` (`pyg_dist.train.entry`) prints the full traceback of a pyg_dist error on "
        "stderr before its one line `[rank r] ErrorType: message`; otherwise the traceback goes to the "
        "`pyg_dist` log at DEBUG only. `dist_session()` accepts `0`, `1` or unset: anything else raises "
        "`InvalidArgumentError` naming the variable at start-up."),
    EnvVar(
        "PYG_DIST_TRANSPORT", "str", "`sockets`",
        "RPC's transport (`pyg_dist.rpc.settings.transport_name`), read at `init_rpc`: `sockets` (pyg_dist's own: one "
        "listener per process, authenticated before a byte is interpreted, frames of raw tensor bytes, no pickle, junk "
        "closes only that connection) or `tensorpipe` (`torch.distributed.rpc`: no authentication, unpickles, "
        "aborts the process on junk). `TrainConfig.transport` (or `init_rpc(transport=...)`), when set, wins; a "
        "distributed loader hands its trainer's choice to its sampler workers. Every process of a job must use the "
        "same. Anything else raises "
        "`InvalidArgumentError` naming the variable.",
        field="TrainConfig.transport"),
    EnvVar(
        "PYG_DIST_WIRE_PROTECTION", "str", "`integrity`",
        "What the `sockets` transport does to every frame (`pyg_dist.rpc.settings.wire_mode`), read at `init_rpc`: "
        "`integrity` (an AES-256-GCM tag over header and bytes under per-connection keys: an altered, dropped, "
        "replayed or "
        "reordered frame fails, `IntegrityError` naming the peer, its connection closes), `encrypt` (also "
        "encrypted) or `off` (the handshake still proves each peer). Every process of a job must use the same: a "
        "peer that differs is refused at its handshake, naming this variable. `TrainConfig.wire_protection`, when "
        "set (or `init_rpc(wire_protection=...)`), wins; a distributed loader hands its trainer's choice to its "
        "sampler workers. Anything else raises "
        "`InvalidArgumentError` naming the variable.",
        field="TrainConfig.wire_protection"),
    EnvVar(
        "PYG_DIST_WORLD_WARM", "flag", "on",
        "Whether `pyg_dist.testing.spawn_world` forks the ranks of a test world from a warm parent that has "
        "imported torch and torch_geometric (`pyg_dist.testing.warm`: about 4 s of CPU saved a rank), read at each "
        "world's start. Off: every rank a fresh interpreter (as `spawn_world(fresh=True)`). A world whose "
        "environment differs from the default in a variable read at start-up gets fresh interpreters anyway; "
        "`spawn_world(fresh=...)`, when given, wins."),
)


#: The launcher's and the system's variables pyg_dist reads (torchrun, torch, gloo, TensorPipe, numba, XDG).
OTHER_VARS: Tuple[str, ...] = (
    "GLOO_SOCKET_IFNAME", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NUMBA_THREADING_LAYER",
    "RANK", "THP_MEM_ALLOC_ENABLE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TP_SOCKET_IFNAME", "WORLD_SIZE", "XDG_CACHE_HOME")
_KNOWN = frozenset(OTHER_VARS) | {v.name for v in ENV_VARS}


def environ(env: Optional[Mapping[str, str]] = None) -> Mapping[str, str]:
    """The mapping variables are read from: ``env`` when given (a test's, or a child's planned environment), else
    this process's environment (read only through this module)."""
    return os.environ if env is None else env


def _known(name: str) -> str:
    if name not in _KNOWN:
        raise InvalidArgumentError("pyg_dist.envvars", "name", name,
                                   "a variable of pyg_dist.envvars.ENV_VARS or OTHER_VARS (list it there first)")
    return name


def raw(name: str, env: Optional[Mapping[str, str]] = None, default: str = "") -> str:
    """The text of variable ``name`` (``default`` when unset), from :func:`environ`; a name neither table lists is
    an :class:`InvalidArgumentError`.

    Example:
        >>> raw("RANK", {"RANK": "3"}), raw("RANK", {}, "0")
        ('3', '0')
    """
    return environ(env).get(_known(name), default)


def is_set(name: str, env: Optional[Mapping[str, str]] = None) -> bool:
    """Whether variable ``name`` is in the environment at all (set to anything, empty included)."""
    return _known(name) in environ(env)


def read_number(name: str, default: float, env: Optional[Mapping[str, str]] = None, *,
                allow_zero: bool = False) -> float:
    """A number variable (unset or blank: ``default``): finite and > 0 (>= 0 with ``allow_zero``), else an
    :class:`InvalidArgumentError` naming the variable and its text."""
    text = raw(name, env).strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value >= 0 if allow_zero else value > 0)):
        raise InvalidArgumentError("environment", f"${name}", text, f"a number {'>=' if allow_zero else '>'} 0")
    return value


def read_port(name: str, env: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """A TCP port variable: ``None`` when unset or empty, else an integer in 1..65535
    (:class:`InvalidArgumentError` naming the variable otherwise)."""
    text = raw(name, env)
    if text == "":
        return None
    try:
        port = int(text)
    except ValueError:
        raise InvalidArgumentError("environment", f"${name}", text, "an integer (a TCP port)") from None
    if not 0 < port < 65536:
        raise InvalidArgumentError("environment", f"${name}", text, "a TCP port in 1..65535")
    return port


def hand_down(name: str, value: str, *, to: str, keep_set: bool = False) -> None:
    """Writes variable ``name`` for whoever reads it after this process: ``to`` names it (sampler workers this
    process starts, torch, gloo, TensorPipe). ``keep_set``: a value already set wins (the user's)."""
    if keep_set and is_set(name):
        return
    os.environ[_known(name)] = value
    LOG.debug("pyg_dist: %s=%s handed down to %s", name, value, to)


def become(env: Mapping[str, str], *, why: str) -> None:
    """Makes ``env`` this process's whole environment (a process forked to be another: ``why`` says which), as if
    it had been started with it."""
    os.environ.clear()
    os.environ.update(env)
    LOG.debug("pyg_dist: the environment replaced: %s", why)


@contextlib.contextmanager
def hidden(name: str, *, why: str) -> Iterator[None]:
    """Takes variable ``name`` out of the environment for the block (a library must not see it: ``why``), then
    puts it back."""
    saved = os.environ.pop(_known(name), None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[name] = saved
            LOG.debug("pyg_dist: %s restored after %s", name, why)


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def read_flag(name: str, default: bool, environ: Optional[Mapping[str, str]] = None) -> bool:
    """A ``flag`` variable: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` (any case; unset or
    empty: ``default``); anything else is an :class:`InvalidArgumentError` naming the variable.

    Example:
        >>> read_flag("PYG_DIST_MALLOC_TUNING", True, {"PYG_DIST_MALLOC_TUNING": "Off"})
        False
    """
    text = raw(name, environ)
    word = text.strip().lower()
    if not word:
        return default
    if word not in _TRUE + _FALSE:
        raise InvalidArgumentError("environment", f"${name}", text, f"one of {list(_TRUE + _FALSE)}, or unset")
    return word in _TRUE


def read_choice(name: str, choices: Tuple[str, ...], default: str,
                environ: Optional[Mapping[str, str]] = None) -> str:
    """A variable that holds one of ``choices`` exactly (unset or empty: ``default``), else
    :class:`InvalidArgumentError` naming it."""
    text = raw(name, environ)
    if text == "":
        return default
    if text not in choices:
        raise InvalidArgumentError("environment", f"${name}", text, f"one of {list(choices)}, or unset")
    return text


def read_folder(name: str, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """A ``path`` variable naming a folder: ``None`` when unset or empty, else the path, which must not name
    something that is not a folder (:class:`InvalidArgumentError` naming the variable otherwise). A path that
    does not exist passes: the data may be absent on this machine, and what reads it says so when used."""
    text = raw(name, environ)
    if not text:
        return None
    if os.path.exists(text) and not os.path.isdir(text):
        raise InvalidArgumentError("environment", f"${name}", text, "a folder (this is a file), or unset")
    return text


def env_var(name: str) -> EnvVar:
    """The registry entry of variable ``name``.

    Raises:
        InvalidArgumentError: ``name`` is not in :data:`ENV_VARS`.
    """
    for var in ENV_VARS:
        if var.name == name:
            return var
    raise InvalidArgumentError("env_var", "name", name, f"one of {[v.name for v in ENV_VARS]}")


__all__ = ["EnvVar", "ENV_VARS", "OTHER_VARS", "env_var", "environ", "raw", "is_set", "read_flag", "read_choice",
           "read_folder", "read_number", "read_port", "hand_down", "become", "hidden"]
