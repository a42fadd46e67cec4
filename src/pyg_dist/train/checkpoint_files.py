"""The files of a checkpoint (:mod:`pyg_dist.train.checkpoint`) and what is checked when they are read.

Each rank writes ``rank_<r>.pt`` (temp file, fsync, rename), then, after a barrier, its marker
``rank_<r>.done``: a small dict with the step, the world size that wrote the step, and the size and crc32
digest of the rank file (the scheme of a partition folder's ``files`` list, :mod:`pyg_dist.format.digests`)::

    {"step": 120, "world_size": 2, "rank": 1, "files_digest": "crc32",
     "file": {"name": "rank_1.pt", "bytes": 2270467, "digest": "9f1c03aa"}}

At resume a rank file whose size or digest differs from its marker is treated like an unreadable one (the
ranks fall back to an older step). Markers written before these fields existed (only ``"step"``) are read as
"unknown": the file is loaded unchecked.

Example:
    >>> size, digest = atomic_save({"w": torch.ones(3)}, Path("/tmp/ck/rank_0.pt"))   # doctest: +SKIP
    >>> state, problem, marker = read_rank_file(Path("/tmp/ck"), 0)                  # doctest: +SKIP
"""
from __future__ import annotations

import os
import pickle
import random
import zlib
from pathlib import Path
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

import torch

from pyg_dist import _fsio
from pyg_dist._fsio import DIGESTS, digest_file
from pyg_dist.errors import CheckpointError, FileWriteError

PREFIX = "step_"
#: The digest recorded in a marker (the partition folders' default).
ALGORITHM = DIGESTS[0]
#: What to do when a checkpoint does not fit the run: the end of several messages.
NEW_DIRECTORY = "or point the run at a new checkpoint directory (TrainConfig.checkpoint_dir) to start afresh"


def rank_file(folder: Path, rank: int) -> Path:
    """Rank ``rank``'s state file in the step folder ``folder``."""
    return folder / f"rank_{rank}.pt"


def marker_file(folder: Path, rank: int) -> Path:
    """Rank ``rank``'s marker in the step folder ``folder`` (written once every rank's files are complete)."""
    return folder / f"rank_{rank}.done"


# ------------------------------------------------------------------------------------------- random generators
def rng_state() -> dict:
    """The generator states of torch (and CUDA), Python and NumPy, in a ``weights_only``-loadable form."""
    state: Dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np
        name, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
        state["numpy"] = (name, torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos), int(has_gauss),
                          float(gauss))
    except ImportError:  # pragma: no cover -- numpy ships with torch's wheels
        pass
    return state


def set_rng_state(state: dict) -> None:
    """Restores what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np
        name, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))


# ------------------------------------------------------------------------------------------- writing
def check_writable(directory: Path) -> None:
    """Creates ``directory`` (and its parents) and writes and removes a probe file in it: a
    :class:`CheckpointError` naming the folder and the cause when that fails (a read-only mount, no permission),
    so a run learns it at start-up, not at its first checkpoint."""
    probe = directory / f".write_probe.{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"pyg_dist")
        probe.unlink()
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise CheckpointError(f"Checkpointer: the checkpoint folder {directory} is not writable ({why}): make it "
                              f"writable, {NEW_DIRECTORY}") from None


def atomic_save(obj, path: Path) -> Tuple[int, str]:
    """``torch.save`` to a temp file, fsync, rename, fsync of the folder (:mod:`pyg_dist._fsio`): a reader sees
    the old file or the whole new one, also after a crash. Returns the file's ``(bytes, crc32 hex)``. A failed
    write removes its temp file and is a :class:`CheckpointError` naming the file and the cause (``No space left
    on device (needs N bytes, F free on that filesystem)``, ...)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        _fsio.save(obj, tmp)
        size, digest = digest_file(tmp, ALGORITHM)
        with _fsio.writing(path):
            os.replace(tmp, path)
        _fsio.fsync_dir(path.parent)
        return size, digest
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, FileWriteError):
            raise CheckpointError(f"writing {path} failed: {exc.problem}") from None
        if isinstance(exc, (OSError, RuntimeError, pickle.PicklingError, AttributeError, TypeError)):
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
            raise CheckpointError(f"writing {path} failed: {why}") from exc
        raise


def write_marker(folder: Path, rank: int, world_size: int, step: int, size: int, digest: str,
                 extra: Optional[Mapping[str, list]] = None) -> None:
    """The marker that makes this rank's part of ``step`` count, with the digest of its rank file and of the
    ``extra/`` files it wrote (``{name: [bytes, digest]}``: :func:`save_extras`)."""
    atomic_save({"step": step, "world_size": world_size, "rank": rank, "files_digest": ALGORITHM,
                 "file": {"name": rank_file(folder, rank).name, "bytes": size, "digest": digest},
                 "extra": dict(extra or {})}, marker_file(folder, rank))


def save_extras(objs: Iterable[Any], folder: Path, rank: int) -> Dict[str, list]:
    """Has each of ``objs`` ``save`` into a private folder, digests what they wrote, moves it into
    ``folder/extra/`` and returns ``{name: [bytes, digest]}`` for this rank's marker (other ranks write their
    partitions' files into the same folder at the same time: only this rank's own files are digested)."""
    import shutil
    out, mine = folder / "extra", folder / "extra" / f".rank_{rank}"
    shutil.rmtree(mine, ignore_errors=True)
    mine.mkdir(parents=True)
    try:
        for obj in objs:
            obj.save(mine)
        written = {}
        for path in sorted(p for p in mine.iterdir() if p.is_file()):
            written[path.name] = list(digest_file(path, ALGORITHM))
            os.replace(path, out / path.name)
        _fsio.fsync_dir(out)
        return written
    except OSError as exc:
        raise CheckpointError(f"writing the extras of {folder} failed: {exc.strerror or exc}") from exc
    finally:
        shutil.rmtree(mine, ignore_errors=True)


def _extra_problem(folder: Path, rank: int, marker: Mapping, algorithm: str) -> Optional[str]:
    """Why an ``extra/`` file rank ``rank`` wrote does not match its marker (``None``: every one does)."""
    extra = marker.get("extra") or {}
    if not isinstance(extra, dict):
        return f"{marker_file(folder, rank)} is malformed (extra entry {extra!r})"
    for name, entry in sorted(extra.items()):
        path = folder / "extra" / str(name)
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2):
            return f"{marker_file(folder, rank)} is malformed (extra file {name!r}: {entry!r})"
        try:
            got = list(digest_file(path, algorithm))
        except OSError as exc:
            return f"cannot read {path} ({exc.strerror or exc})"
        if got != list(entry):
            return (f"{path}: {got[0]} bytes, {algorithm} {got[1]}; {marker_file(folder, rank).name} lists "
                    f"{entry[0]} bytes, {entry[1]}: a corrupt, truncated or altered file")
    return None


# ------------------------------------------------------------------------------------------- reading
def read_marker(path: Path) -> Optional[dict]:
    """The marker at ``path`` (a dict), or ``None`` when it is missing or unreadable."""
    try:
        marker = torch.load(path, weights_only=True)
    except Exception:  # noqa: BLE001 -- torch raises many types for truncated or corrupt files
        return None
    return marker if isinstance(marker, dict) else None


def marker_world_size(marker: Optional[Mapping]) -> Optional[int]:
    """The world size a marker records (``None``: a marker of an older version, or none)."""
    size = None if marker is None else marker.get("world_size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def _digest_problem(folder: Path, rank: int, marker: Mapping) -> Optional[str]:
    """Why rank ``rank``'s file does not match its marker's size and digest (``None``: it does)."""
    path, entry = rank_file(folder, rank), marker["file"]
    algorithm = marker.get("files_digest", ALGORITHM)
    if not (isinstance(entry, dict) and isinstance(entry.get("bytes"), int) and isinstance(entry.get("digest"), str)
            and algorithm in DIGESTS):
        return f"{marker_file(folder, rank)} is malformed (file entry {entry!r}, files_digest {algorithm!r})"
    try:
        size, digest = digest_file(path, algorithm)
    except OSError as exc:
        return f"cannot read {path} ({exc.strerror or exc})"
    if size != entry["bytes"]:
        return f"{path} holds {size} bytes but its marker lists {entry['bytes']} (a truncated or replaced file)"
    if digest != entry["digest"]:
        return (f"{path}: content differs from the {algorithm} digest in {marker_file(folder, rank).name} "
                f"({digest} != {entry['digest']}): a corrupt or altered file")
    return _extra_problem(folder, rank, marker, algorithm)


def read_rank_file(folder: Path, rank: int) -> Tuple[Optional[dict], Optional[str], Optional[dict]]:
    """``(state, None, marker)``, or ``(None, why, marker)`` when rank ``rank``'s file of the completed step in
    ``folder`` cannot be read or fails the digest its marker lists; ``marker`` is ``None`` if unreadable."""
    marker = read_marker(marker_file(folder, rank))
    if marker is None or marker.get("step") != int(folder.name[len(PREFIX):]):
        return None, f"{marker_file(folder, rank)} is unreadable or names another step", marker
    if "file" in marker:
        problem = _digest_problem(folder, rank, marker)
        if problem is not None:
            return None, problem, marker
    path = rank_file(folder, rank)
    try:
        state = torch.load(path, weights_only=True)
    except Exception as exc:  # noqa: BLE001 -- torch raises many types for truncated or corrupt files
        text = str(exc).splitlines()[0] if str(exc) else ""
        return None, f"cannot read {path} ({type(exc).__name__}: {text})", marker
    if not isinstance(state, dict) or not isinstance(state.get("position"), dict):
        return None, f"{path} holds no checkpoint state", marker
    pos = state["position"]
    if not all(isinstance(pos.get(k), int) and pos[k] >= 0 for k in ("global_step", "epoch", "batch")):
        return None, f"{path}: its position {pos!r} is not three counts (global_step, epoch, batch)", marker
    return state, None, marker


def newest_world_size(directory: Path) -> Optional[Tuple[Path, int]]:
    """``(folder, world size)`` of the newest step folder in ``directory`` with a marker that records one
    (any rank's: a rank of a larger world finds the markers of a smaller one on a shared file system)."""
    folders = [f for f in directory.glob(f"{PREFIX}*") if f.name[len(PREFIX):].isdigit()]
    for folder in sorted(folders, key=lambda f: int(f.name[len(PREFIX):]), reverse=True):
        for path in sorted(folder.glob("rank_*.done")):
            size = marker_world_size(read_marker(path))
            if size is not None:
                return folder, size
    return None


# ------------------------------------------------------------------------------------------- fitting the run
def check_fits(model: torch.nn.Module, saved: Any, path: Path) -> None:
    """A :class:`CheckpointError` naming ``path`` and the first parameter (or buffer) whose name or shape
    differs between the saved ``state_dict`` and ``model``'s."""
    if not isinstance(saved, dict):
        raise CheckpointError(f"{path}: its model state is a {type(saved).__name__}, not a state_dict")
    mine = model.state_dict()
    why = None
    for name, value in mine.items():
        if name not in saved:
            why = f"the model's parameter {name!r} (shape {list(value.shape)}) is not in the file"
        elif not isinstance(saved[name], torch.Tensor):
            why = f"parameter {name!r} is a {type(saved[name]).__name__} in the file"
        elif saved[name].shape != value.shape:
            why = (f"parameter {name!r} has shape {list(saved[name].shape)} in the file, {list(value.shape)} in "
                   "the model")
        if why:
            break
    extra = [name for name in saved if name not in mine]
    if why is None and extra:
        why = f"the file's parameter {extra[0]!r} is not in the model"
    if why is not None:
        raise CheckpointError(f"{path} holds the checkpoint of another model: {why}; build the model that wrote "
                              f"it, {NEW_DIRECTORY}")


def load_into(obj, what: str, saved: Any, path: Path) -> None:
    """``obj.load_state_dict(saved)``; what it raises for a state that does not fit becomes a
    :class:`CheckpointError` naming ``path`` and ``what``."""
    if saved is None:
        raise CheckpointError(f"{path}: has no {what} state")
    if what == "model":
        check_fits(obj, saved, path)
    try:
        obj.load_state_dict(saved)
    except (ValueError, RuntimeError, KeyError, TypeError, IndexError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(f"{path}: its {what} state does not fit this run's {what} ({text}); "
                              f"{NEW_DIRECTORY}") from None


def state_digest(states: Iterable[Any]) -> str:
    """crc32 (hex) of nested state dicts: every tensor's dtype, shape and bytes, every other leaf's ``repr``,
    in key order. Equal states give equal digests."""
    crc = 0

    def walk(obj: Any) -> None:
        nonlocal crc
        if isinstance(obj, torch.Tensor):
            t = obj.detach().cpu().contiguous()
            crc = zlib.crc32(f"T{t.dtype}{list(t.shape)}".encode(), crc)
            crc = zlib.crc32(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"", crc)
        elif isinstance(obj, Mapping):
            for key in sorted(obj, key=repr):
                crc = zlib.crc32(f"K{key!r}".encode(), crc)
                walk(obj[key])
        elif isinstance(obj, (list, tuple)):
            crc = zlib.crc32(f"L{len(obj)}".encode(), crc)
            for item in obj:
                walk(item)
        else:
            crc = zlib.crc32(f"V{obj!r}".encode(), crc)

    for state in states:
        walk(state)
    return f"{crc:08x}"
