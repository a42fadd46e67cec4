"""Every ``PYG_DIST_*`` variable checked when a run starts, each with the parser of the code that reads it.

Each variable of :data:`pyg_dist.envvars.ENV_VARS` is read where it acts, often long after start-up (the
serving budget at the first remote lookup served, the frame cap at the first frame): a typo there used to
surface minutes into a run. :func:`validate_env` runs every one of those readers once, in registry order,
and raises the first one's :class:`~pyg_dist.errors.InvalidArgumentError` (naming the variable and the
value). :func:`~pyg_dist.train.session.dist_session` calls it first, before the process group forms.

:data:`READERS` maps each registered variable to its reader; ``tests/train/test_env_check.py`` checks that
it covers the registry, so a new variable cannot be left out.

Example:
    >>> import os
    >>> os.environ["PYG_DIST_SERVE_BUDGET_MB"] = "abc"
    >>> try:
    ...     validate_env()
    ... except InvalidArgumentError as exc:
    ...     print(exc.name, exc.value)
    $PYG_DIST_SERVE_BUDGET_MB abc
    >>> del os.environ["PYG_DIST_SERVE_BUDGET_MB"]
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable

from pyg_dist import timeouts
from pyg_dist.context import env_rpc_port
from pyg_dist.envvars import ENV_VARS, read_choice, read_flag, read_folder
from pyg_dist.errors import InvalidArgumentError


def _backend() -> object:
    from pyg_dist.ops.backend import env_backend
    return env_backend()


def _buffer_pool() -> object:
    from pyg_dist.store import buffers
    return buffers._default_limit()  # read at that module's import: checked again here, by the same parser


def _frame_max() -> object:
    from pyg_dist.rpc.settings import frame_max_bytes
    return frame_max_bytes()


def _ifname() -> object:
    from pyg_dist.iface import listen_address
    return listen_address("127.0.0.1")  # $PYG_DIST_IFNAME's address when set (checked), else the argument


def _reply_max() -> object:
    from pyg_dist.store.limits import reply_max_bytes
    return reply_max_bytes()


def _serve_budget() -> object:
    from pyg_dist.store.limits import serve_budget_bytes
    return serve_budget_bytes()


def _tp_transports() -> object:
    from pyg_dist.rpc.settings import tensorpipe_transports
    return tensorpipe_transports()


def _secret_file() -> object:
    from pyg_dist.rpc.settings import file_secret
    return file_secret()


def _wire() -> object:
    from pyg_dist.rpc.settings import wire_mode
    return wire_mode()


def _transport() -> object:
    from pyg_dist.rpc.settings import transport_name
    return transport_name()


#: Variable -> the reader the code uses for it (it raises ``InvalidArgumentError`` naming the variable).
READERS: Dict[str, Callable[[], object]] = {
    "PYG_DIST_BACKEND": _backend,
    "PYG_DIST_BUFFER_POOL_MB": _buffer_pool,
    "PYG_DIST_DATA": lambda: read_folder("PYG_DIST_DATA"),
    "PYG_DIST_FAILURE_TIMEOUT": timeouts.failure_timeout,
    "PYG_DIST_FRAME_MAX_MB": _frame_max,
    "PYG_DIST_IFNAME": _ifname,
    "PYG_DIST_MALLOC_TUNING": lambda: read_flag("PYG_DIST_MALLOC_TUNING", True),
    "PYG_DIST_REPLY_MAX_MB": _reply_max,
    "PYG_DIST_RPC_PORT": env_rpc_port,
    "PYG_DIST_RPC_TRANSPORTS": _tp_transports,
    "PYG_DIST_TENSORPIPE_TRANSPORTS": _tp_transports,
    "PYG_DIST_SECRET_FILE": _secret_file,
    "PYG_DIST_SERVE_BUDGET_MB": _serve_budget,
    "PYG_DIST_TRACEBACK": lambda: read_choice("PYG_DIST_TRACEBACK", ("0", "1"), "0"),
    "PYG_DIST_TRANSPORT": _transport,
    "PYG_DIST_WIRE_PROTECTION": _wire,
    "PYG_DIST_WORLD_WARM": lambda: read_flag("PYG_DIST_WORLD_WARM", True),
}


def validate_env(skip: Iterable[str] = ()) -> None:
    """Reads every registered ``PYG_DIST_*`` variable with its own parser; the first bad one raises.

    Args:
        skip: Variables not to check: those whose setting the run gives explicitly (the setting wins, and
            ``dist_session()`` writes it into the variable).

    Raises:
        InvalidArgumentError: a variable holds a value its reader refuses (names the variable and the value),
            or a registered variable has no reader here.
    """
    skipped = set(skip)
    for var in ENV_VARS:
        if var.name in skipped:
            continue
        reader = READERS.get(var.name)
        if reader is None:
            raise InvalidArgumentError("validate_env", "variable", var.name,
                                       "a variable with a reader in pyg_dist.train.env_check.READERS")
        reader()


def overridden(config: object) -> set:
    """The variables whose ``TrainConfig`` setting ``config`` gives (not ``None``): those settings win."""
    prefix = f"{type(config).__name__}."
    return {v.name for v in ENV_VARS if v.field and v.field.startswith(prefix)
            and getattr(config, v.field[len(prefix):], None) is not None}


__all__ = ["READERS", "validate_env", "overridden"]
