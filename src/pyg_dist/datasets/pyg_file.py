"""A graph saved with ``torch.save``: a PyG ``Data`` / ``HeteroData``, or an ``InMemoryDataset``'s processed file.

The file is unpickled by ``torch.load(weights_only=True)`` with exactly PyG's graph classes as safe globals
(:data:`PYG_GLOBALS`: ``Data``, ``HeteroData``, their storages and attribute classes). A graph that was used
before it was saved holds PyG's attribute cache, a ``defaultdict`` that ``weights_only`` cannot rebuild: it is
unpickled by ``torch.load(pickle_module=...)`` with an unpickler that admits the same globals and no other.
Before either, the pickle inside the file is read statically and every class or function it refers to is
listed: one outside :data:`PYG_GLOBALS` and torch's tensor rebuilding (a custom ``Data`` subclass, a model,
anything else) is a :class:`~pyg_dist.errors.DataFileError` naming it, raised before a single object of the
file is built. So is a file that is not a graph (a tensor, a dict, a model ``state_dict``) or that is
truncated or corrupt: one line saying what was found and how to re-save it.

An ``InMemoryDataset``'s processed file (``processed/data.pt``, written by ``InMemoryDataset.save`` as
``(data.to_dict(), slices, data_cls)``) is read when it holds one graph; a file of several graphs is refused
with their count.
"""
from __future__ import annotations

import pickle
import pickletools
import re
import types
import zipfile
from pathlib import Path
from typing import Any, List, Optional, Set, Union

import torch

from pyg_dist.errors import DataFileError

#: PyG's graph classes a saved ``Data`` / ``HeteroData`` refers to (module, name).
PYG_GLOBALS = (
    ("torch_geometric.data.data", "Data"), ("torch_geometric.data.data", "DataEdgeAttr"),
    ("torch_geometric.data.data", "DataTensorAttr"), ("torch_geometric.data.hetero_data", "HeteroData"),
    ("torch_geometric.data.storage", "BaseStorage"), ("torch_geometric.data.storage", "GlobalStorage"),
    ("torch_geometric.data.storage", "NodeStorage"), ("torch_geometric.data.storage", "EdgeStorage"),
    ("torch_geometric.data.feature_store", "TensorAttr"), ("torch_geometric.data.graph_store", "EdgeAttr"),
    # a storage that has been used caches its attribute kinds: defaultdict(set) of AttrType
    ("torch_geometric.data.storage", "AttrType"), ("collections", "defaultdict"), ("builtins", "set"),
)
#: torch's own references of a file of plain tensors (``torch.<Kind>Storage`` also).
TORCH_GLOBALS = {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "__builtin__.set"}
_STORAGE = re.compile(r"torch\.\w+Storage")
RESAVE = ("save the graph itself, torch.save(data, path); a subclass of Data as a plain one: "
          "torch.save(Data(**data.to_dict()), path) (HeteroData.from_dict(data.to_dict()) for a HeteroData)")


def _pyg_classes() -> List[Any]:
    import importlib
    return [getattr(importlib.import_module(module), name) for module, name in PYG_GLOBALS]


def _allowed(name: str) -> bool:
    return name in {f"{m}.{n}" for m, n in PYG_GLOBALS} | TORCH_GLOBALS or bool(_STORAGE.fullmatch(name))


class _GraphUnpickler(pickle.Unpickler):
    """The same allowlist enforced while unpickling (for files ``weights_only`` cannot rebuild)."""

    def find_class(self, module: str, name: str):
        if not _allowed(f"{module}.{name}"):
            raise pickle.UnpicklingError(f"{module}.{name} is not one of PyG's graph classes")
        return super().find_class(module, name)


#: ``torch.load``'s ``pickle_module`` for a graph whose storages hold PyG's attribute cache.
_GRAPH_PICKLE = types.ModuleType("pyg_dist_graph_pickle")
_GRAPH_PICKLE.Unpickler = _GraphUnpickler  # type: ignore[attr-defined]
_GRAPH_PICKLE.load = pickle.load  # type: ignore[attr-defined]


def _pickle_bytes(path: Path) -> bytes:
    try:
        with zipfile.ZipFile(path) as zf:
            names = [n for n in zf.namelist() if n.endswith("data.pkl")]
            if len(names) != 1:
                raise DataFileError(path, "is a zip archive but no torch.save file (no single data.pkl in it); "
                                    "save the graph with torch.save(data, path)")
            bad = zf.testzip()  # every record's CRC: a flipped byte in a tensor is found here, not later
            if bad is not None:
                raise DataFileError(path, f"is corrupt (record {bad} fails its CRC check); save the graph "
                                    "again with torch.save(data, path)")
            return zf.read(names[0])
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise DataFileError(path, f"is not a readable torch.save file ({e}: truncated, corrupt, or written "
                            "with _use_new_zipfile_serialization=False); save the graph again with "
                            "torch.save(data, path)") from None


def file_globals(path: Union[str, Path]) -> Set[str]:
    """Every ``module.name`` the pickle of a ``torch.save`` file refers to, read without unpickling it.

    Raises:
        DataFileError: not a ``torch.save`` zip file, a corrupt pickle, or a reference that cannot be read
            statically.
    """
    path = Path(path)
    raw = _pickle_bytes(path)
    found: Set[str] = set()
    memo: dict = {}
    strings: List[Optional[str]] = []  # the values pushed, as far as a STACK_GLOBAL needs them
    try:
        for op, arg, _ in pickletools.genops(raw):
            if op.name == "GLOBAL":
                found.add(str(arg).replace(" ", "."))
            elif op.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
                strings.append(str(arg))
                continue
            elif op.name in ("BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE"):
                memo[len(memo) if arg is None else arg] = strings[-1] if strings else None
                continue
            elif op.name in ("BINGET", "LONG_BINGET", "GET"):
                strings.append(memo.get(arg))
                continue
            elif op.name == "STACK_GLOBAL":
                if len(strings) < 2 or None in strings[-2:]:
                    raise ValueError("a STACK_GLOBAL whose names cannot be read statically")
                found.add(f"{strings[-2]}.{strings[-1]}")
            strings.append(None)
    except ValueError as e:
        raise DataFileError(path, f"holds a corrupt pickle ({e}); save the graph again with "
                            "torch.save(data, path)") from None
    return found


def _refused(names: Set[str]) -> List[str]:
    return sorted(g for g in names if not _allowed(g))


def _num_graphs(slices: Any) -> int:
    if slices is None:  # InMemoryDataset.collate of a single graph keeps no slices
        return 1
    while isinstance(slices, dict) and slices:
        slices = next(iter(slices.values()))
    return int(slices.numel()) - 1 if isinstance(slices, torch.Tensor) else -1


def _from_dataset(path: Path, obj: tuple):
    """A processed ``InMemoryDataset`` tuple ``(data dict, slices[, data_cls])`` holding one graph."""
    from torch_geometric.data import Data, HeteroData
    count = _num_graphs(obj[1])
    if count != 1:
        raise DataFileError(path, f"is an InMemoryDataset file of {count} graphs; pyg-dist-partition takes one "
                            "graph: save the one you want, torch.save(dataset[i], path)")
    cls = obj[2] if len(obj) == 3 else Data
    if isinstance(obj[0], (Data, HeteroData)):
        return obj[0]
    return cls.from_dict(obj[0])


def _describe(obj: Any) -> str:
    if isinstance(obj, torch.Tensor):
        hint = (" (an edge list? use --dataset edgelist --root FILE)" if obj.dim() == 2 and 2 in obj.shape
                and not obj.is_floating_point() else "")
        return f"holds a tensor of shape {list(obj.shape)}, not a graph{hint}; save the graph: torch.save(data, path)"
    if isinstance(obj, dict):
        keys = sorted(map(str, obj))
        if {"rowptr", "col", "N"} <= set(keys):
            return "holds a {rowptr, col, N} CSR file, not a PyG graph: use --dataset products_like"
        shown = ", ".join(keys[:5]) + (", ..." if len(keys) > 5 else "")
        return (f"holds a dict ({len(keys)} keys: {shown}), not a graph (a model's state_dict?); save the "
                "graph itself, torch.save(data, path), or, if these are its attributes, "
                "torch.save(Data(**the_dict), path)")
    return f"holds a {type(obj).__name__}, not a graph; save the graph itself: torch.save(data, path)"


def load_pyg_file(path: Union[str, Path]):
    """Loads the PyG ``Data`` / ``HeteroData`` saved at ``path`` (see the module docstring).

    Args:
        path: A file written by ``torch.save(data, path)`` or by ``InMemoryDataset.save`` (one graph).

    Raises:
        DataFileError: not a graph, a class outside PyG's graph classes (named; nothing of it runs), several
            graphs, or a truncated / corrupt file; the message says how to re-save it.

    Example:
        >>> data = load_pyg_file("cora.pt")  # doctest: +SKIP
    """
    from torch_geometric.data import Data, HeteroData
    path = Path(path)
    if not path.is_file():
        raise DataFileError(path, "is no file: give the file written by torch.save(data, path) (for an "
                            "InMemoryDataset, its processed/data.pt)")
    found = file_globals(path)
    refused = _refused(found)
    if refused:
        raise DataFileError(path, f"refers to {', '.join(refused)} (not PyG's graph classes Data / HeteroData; "
                            f"nothing of it was run): {RESAVE}")
    try:
        if "collections.defaultdict" in found:  # PyG's attribute cache: weights_only cannot fill a defaultdict
            obj = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_GRAPH_PICKLE)
        else:
            # only the classes not yet allowed: leaving the context removes what it added, and PyG's own
            # process-wide allowlist (its Planetoid / InMemoryDataset loads rely on it) must stay as it was
            allowed = torch.serialization.get_safe_globals()
            with torch.serialization.safe_globals([c for c in _pyg_classes() if c not in allowed]):
                obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 -- any failure past the static check is a bad file
        first = (str(e).strip().splitlines() or [""])[0]
        raise DataFileError(path, f"could not be read ({type(e).__name__}: {first}); save the graph again "
                            "with torch.save(data, path)") from None
    if type(obj) in (Data, HeteroData):
        return obj
    if isinstance(obj, tuple) and len(obj) in (2, 3) and (obj[1] is None or isinstance(obj[1], dict)) and (
            len(obj) == 2 or obj[2] in (Data, HeteroData)):
        return _from_dataset(path, obj)
    raise DataFileError(path, _describe(obj))


def holds_pyg_graph(path: Union[str, Path]) -> bool:
    """Whether the ``torch.save`` file at ``path`` refers to a PyG graph class (read statically)."""
    try:
        return any(g.startswith("torch_geometric.data.") for g in file_globals(path))
    except DataFileError:
        return False


__all__ = ["load_pyg_file", "file_globals", "holds_pyg_graph", "PYG_GLOBALS"]
