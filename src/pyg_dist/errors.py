"""The exceptions pyg_dist raises. All derive from :class:`PyGDistError`."""
from __future__ import annotations

from typing import Any, Optional


class PyGDistError(Exception):
    """Base class of every pyg_dist error."""


class InvalidArgumentError(PyGDistError, ValueError):
    """A user-supplied argument has a wrong value; the message names the argument and the value."""

    def __init__(self, where: str, name: str, value: Any, expected: str):
        self.where, self.name, self.value, self.expected = where, name, value, expected
        shown = repr(value)
        if len(shown) > 200:
            shown = shown[:200] + "..."
        super().__init__(f"{where}: argument '{name}' got {shown}; expected {expected}")


class PartitionFormatError(PyGDistError, ValueError):
    """A partition folder is missing, incomplete, corrupt, or does not match the world."""

    def __init__(self, path: Any, problem: str):
        self.path, self.problem = str(path), problem
        super().__init__(f"partition format error in '{path}': {problem}")


class DataFileError(PyGDistError, ValueError):
    """An input data file (not a partition folder) is corrupt or refers to code it must not run."""

    def __init__(self, path: Any, problem: str):
        self.path, self.problem = str(path), problem
        super().__init__(f"data file error in '{path}': {problem}")


class FileWriteError(PyGDistError, OSError):
    """A file or folder could not be written (a full disk, no permission, an I/O error). The one-line message
    names the file and the cause (``os.strerror``) and, for a full disk, the bytes needed and free on its
    filesystem; ``errno`` is the cause's (``errno.ENOSPC``, ...), ``path`` the file."""

    def __init__(self, path: Any, errno: Optional[int], problem: str):
        self.path, self.problem = str(path), problem
        super().__init__(f"cannot write '{path}': {problem}")
        self.errno = errno

    def __str__(self) -> str:  # OSError's own would print "[Errno None] None"
        return str(self.args[0])

    def __reduce__(self):  # crosses process boundaries (spawned ranks) intact
        return type(self), (self.path, self.errno, self.problem)


class CheckpointError(PyGDistError, RuntimeError):
    """A checkpoint cannot be written (the folder is not writable, a write failed) or does not fit the run
    resuming from it (another world size, another model, replicas that differ after loading); the message
    names the folder or file, the values and what to do."""


class RemoteCallError(PyGDistError, RuntimeError):
    """A remote call failed on its callee; carries the op, partition, rank and remote traceback."""

    def __init__(self, op: str, partition: Optional[int], rank: Optional[int], remote_traceback: str):
        self.op, self.partition, self.rank = op, partition, rank
        self.remote_traceback = remote_traceback
        super().__init__(f"remote call '{op}' to partition {partition} (rpc rank {rank}) failed:\n"
                         f"{remote_traceback}")


class TamperedStoreError(PyGDistError, RuntimeError):
    """A key of the job's rendezvous store holds what no process of this job wrote there (a forged or malformed
    listener entry, a generation counter moved from outside): names the key and what is wrong with it."""

    def __init__(self, key: str, problem: str):
        self.key, self.problem = key, problem
        super().__init__(f"the rendezvous store's key '{key}' was tampered with: {problem}")

    def __reduce__(self):  # crosses process boundaries (spawned ranks) intact
        return type(self), (self.key, self.problem)


class NotInitializedError(PyGDistError, RuntimeError):
    """A distributed facility was used before it was initialised (or after shutdown)."""


class RpcTimeoutError(PyGDistError, TimeoutError):
    """A remote call or a rendezvous did not complete within its timeout."""


#: Why a peer's connection breaks, as survivors say it when that peer published no failure line
#: (:mod:`pyg_dist.rpc.verdict`): all that is known, on either transport. A peer that failed on a typed error, or
#: whose TensorPipe transport aborted, published its own line, and survivors quote that instead.
PEER_LOST = ("that process ended without saying why (killed by a signal, out of memory) or stopped answering "
             "(a network fault)")
#: The same on the ``tensorpipe`` transport (kept for callers of the old name: no more guessing at a TensorPipe
#: abort, whose line the aborting rank publishes).
PEER_GONE = PEER_LOST


class PeerFailedError(PyGDistError, RuntimeError):
    """A peer process died, hung past the failure bound, or became unreachable during ``phase``
    (``peer`` names what is known of it: a rank, a partition, a host, a worker pid; ``said``: the line that peer
    published before it exited, :mod:`pyg_dist.rpc.verdict`)."""

    def __init__(self, phase: str, peer: str, detail: str, said: Optional[str] = None):
        self.phase, self.peer, self.detail, self.said = phase, peer, detail, said
        if said:  # the peer's own published line (``peer rank 1 failed: ErrorType: ...``) leads
            super().__init__(f"{said} (seen here during {phase}: {detail})")
        else:
            super().__init__(f"peer {peer} failed during {phase}: {detail}")


class AgentLostError(PyGDistError, RuntimeError):
    """This rank's launcher, the torchrun agent that is its parent process (pid ``agent_pid``), is gone (the rank
    was re-parented to ``new_parent``): the rank ends within the failure bound ``bound`` instead of running on
    as an orphan (:mod:`pyg_dist.train.orphan`)."""

    def __init__(self, agent_pid: int, new_parent: int, bound: float):
        self.agent_pid, self.new_parent, self.bound = agent_pid, new_parent, bound
        super().__init__(f"this rank's parent, the torchrun agent pid {agent_pid}, is gone (the rank now belongs "
                         f"to pid {new_parent}): ending this rank within the failure bound ({bound:g} s) instead "
                         "of training on as an orphan")

    def __reduce__(self):  # crosses process boundaries intact
        return type(self), (self.agent_pid, self.new_parent, self.bound)


class QuantisationError(PyGDistError, ValueError):
    """Rows cannot travel in the quantised wire format (``remote_rows="int8"``: NaN / inf, or a magnitude over
    ``2**126``), or a quantised reply does not match what was asked (shapes, dtypes, non-finite scales)."""


class ServingLimitError(PyGDistError, RuntimeError):
    """An owner refused a request, or could not admit it in time, under one of its serving limits. Names
    the setting (``setting``, an environment variable), its value in force (``limit``) and the request."""

    def __init__(self, setting: str, limit: Any, problem: str):
        self.setting, self.limit, self.problem = setting, limit, problem
        super().__init__(f"{problem} (${setting} = {limit})")

    def __reduce__(self):  # crosses process boundaries (spawned ranks) intact
        return type(self), (self.setting, self.limit, self.problem)


class MissingDependencyError(PyGDistError, ImportError):
    """An optional package that a feature needs is not installed; the message says what to install."""

    def __init__(self, package: str, needed_for: str, install: Optional[str] = None):
        self.package, self.needed_for = package, needed_for
        super().__init__(f"{needed_for} needs the package '{package}', which is not installed; "
                         f"install it with: pip install {install or package}")


def require(module: str, needed_for: str, install: Optional[str] = None):
    """Imports ``module`` or raises :class:`MissingDependencyError` naming the package to install.

    Example:
        >>> np = require("numpy", "reading .npy files")
    """
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(install or module.split(".")[0], needed_for, install) from None


def check_positive_int(where: str, name: str, value: Any, allow_zero: bool = False) -> int:
    """Returns ``value`` as int, or raises :class:`InvalidArgumentError` naming ``name``."""
    ok = isinstance(value, int) and not isinstance(value, bool) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise InvalidArgumentError(where, name, value, "a non-negative int" if allow_zero else "a positive int")
    return int(value)


def check_seconds(where: str, name: str, value: Any) -> float:
    """Returns ``value`` as float seconds, or raises :class:`InvalidArgumentError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidArgumentError(where, name, value, "a positive number of seconds")
    return float(value)


def check_choice(where: str, name: str, value: Any, choices) -> Any:
    """Returns ``value`` if it is one of ``choices``, else raises :class:`InvalidArgumentError`."""
    if value not in choices:
        raise InvalidArgumentError(where, name, value, f"one of {sorted(map(str, choices))}")
    return value
