"""Feature precision: which attributes are *features*, the dtypes a folder may store them in, the one cast,
and META.json's record of every attribute's stored dtype.

A **feature** is a floating-point node or edge attribute whose name is not in :data:`EXACT_ATTRS`
(``x``, ``edge_attr``, ``pos``, ... ; any float attribute a model reads). Attributes kept exactly as given,
whatever the setting: labels (``y``, ``edge_label``), the sampling weight (``edge_weight``), times (``time``,
``edge_time``), and every integer or boolean attribute (masks, ids).

* The partitioners (``feature_dtype=`` / ``pyg-dist-partition --feature-dtype``) store features as
  ``float32``, ``bfloat16`` or ``float16`` (:data:`FEATURE_DTYPES`), cast once when the folder is written
  (:func:`cast_features`; a value the dtype cannot hold, e.g. above 65504 in ``float16``, is an
  :class:`InvalidArgumentError` naming the setting, the attribute and rows). ``None`` keeps the input's dtype.
* META.json's ``pyg_dist`` section records the setting (``"feature_dtype"``) and the stored dtype of every
  node and edge attribute (``"attr_dtypes"``: :func:`attr_dtypes`); opening a partition checks its files
  agree (:func:`check_stored`). Folders written before carry neither key and open as they always did.
* META.json also records the finite ``[min, max]`` of every floating attribute as stored (``"attr_ranges"``:
  :func:`attr_ranges`). A loader's ``feature_dtype`` that cannot hold a feature's range (e.g. ``float16`` for
  bfloat16 values up to 1e5) is an :class:`InvalidArgumentError` naming ``feature_dtype``, the attribute and
  the range, when the loader is built (:func:`check_batch_dtype`), never ``inf`` rows in batches. Folders
  written before the record: a cast that narrows the range (to ``float16``) is checked against each rank's own
  rows (one pass over them); a cast that does not (to ``float32`` / ``float64``) cannot overflow.
* Stores, caches and RPC replies keep the stored dtype (half the bytes for 16-bit features); the distributed
  loaders cast each batch's features once, to their ``feature_dtype`` (:func:`batch_value`; default
  ``float32``, ``None`` keeps the stored dtype).

Example:
    >>> import torch
    >>> parse_dtype("Partitioner", "feature_dtype", "bfloat16")
    torch.bfloat16
    >>> is_feature("x", torch.float32), is_feature("y", torch.float32), is_feature("x", torch.int64)
    (True, False, False)
    >>> cast_features({"x": torch.ones(2, 3), "y": torch.zeros(2)}, torch.float16, "P", "feature_dtype", "n")["x"].dtype
    torch.float16
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from pyg_dist.errors import InvalidArgumentError, PartitionFormatError
from pyg_dist.format import meta as M
from pyg_dist.format.data import PartitionData
from pyg_dist.format.schema import EDGE_TIME, NODE_TIME, WEIGHT

#: The dtypes a folder may store its features in (the partitioners' ``feature_dtype``).
FEATURE_DTYPES: Dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                                          "float16": torch.float16}
#: The dtypes a batch's features may be cast to (the loaders' and ``TrainConfig``'s ``feature_dtype``).
BATCH_DTYPES: Dict[str, torch.dtype] = dict(FEATURE_DTYPES, float64=torch.float64)
#: Floating attributes that are never cast: labels, the sampling weight and times.
EXACT_ATTRS = frozenset({"y", "edge_label", WEIGHT, NODE_TIME, EDGE_TIME})
#: META.json keys (in the ``pyg_dist`` section).
META_SETTING, META_DTYPES, META_RANGES, META_SHAPES = "feature_dtype", "attr_dtypes", "attr_ranges", "attr_shapes"
_RANGE_CHUNK = 1 << 22  # elements per step of :func:`finite_range`


def parse_dtype(where: str, arg: str, value: Any, choices: Mapping[str, torch.dtype] = FEATURE_DTYPES
                ) -> Optional[torch.dtype]:
    """``value`` (``None``, a ``torch.dtype`` or its name, with or without ``torch.``) as a dtype of
    ``choices``, or ``None``; else an :class:`InvalidArgumentError` from ``where`` naming ``arg``."""
    if value is None:
        return None
    if isinstance(value, torch.dtype) and value in choices.values():
        return value
    if isinstance(value, str) and value.removeprefix("torch.") in choices:
        return choices[value.removeprefix("torch.")]
    raise InvalidArgumentError(where, arg, value, f"None or one of {list(choices)}")


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"`` (META.json's spelling)."""
    return str(dtype).removeprefix("torch.")


def torch_dtype(value: Any) -> torch.dtype:
    """The torch dtype of a tensor, a numpy array or anything with a numpy ``dtype`` (an ``.npy`` reader)."""
    if isinstance(value, Tensor):
        return value.dtype
    return torch.from_numpy(np.empty(0, dtype=np.dtype(value.dtype))).dtype


def is_feature(name: str, dtype: torch.dtype) -> bool:
    """Whether attribute ``name`` of ``dtype`` is a feature: floating point and not in :data:`EXACT_ATTRS`."""
    return dtype.is_floating_point and name not in EXACT_ATTRS


def stored_dtype(name: str, dtype: torch.dtype, feature_dtype: Optional[torch.dtype]) -> torch.dtype:
    """The dtype attribute ``name`` (given as ``dtype``) is stored in under the setting ``feature_dtype``."""
    return feature_dtype if feature_dtype is not None and is_feature(name, dtype) else dtype


def cast_features(feats: Mapping[str, Tensor], feature_dtype: Optional[torch.dtype], where: str, arg: str,
                  label: str) -> Dict[str, Tensor]:
    """``feats`` with every feature in ``feature_dtype`` (others, and features already in it, unchanged and
    not copied).

    Raises:
        InvalidArgumentError: from ``where`` naming ``arg``, when a finite value of a feature (of ``label``,
            e.g. a node type) is not finite in ``feature_dtype`` (too large for ``float16``).
    """
    out = {}
    for name, value in feats.items():
        want = stored_dtype(name, value.dtype, feature_dtype)
        out[name] = value if want == value.dtype else _cast(value, want, where, arg, f"{label}.{name}")
    return out


def _cast(value: Tensor, dtype: torch.dtype, where: str, arg: str, name: str) -> Tensor:
    out, bad = cast_rows(value, dtype)
    if bad is not None:
        rows = bad.nonzero().view(-1)
        overflow_error(where, arg, dtype, name, rows.numel(), rows[:5].tolist(), float(value[rows[0]].abs().max()))
    return out


def cast_rows(value: Tensor, dtype: torch.dtype) -> Tuple[Tensor, Optional[Tensor]]:
    """``value`` in ``dtype``, and per row whether a finite value overflowed (``None``: none did)."""
    out = value.to(dtype)
    if not out.numel():
        return out, None
    bad = (torch.isfinite(value) & ~torch.isfinite(out)).reshape(value.size(0), -1).any(1)
    return out, (bad if bool(bad.any()) else None)


def overflow_error(where: str, arg: str, dtype: torch.dtype, name: str, count: int, first: list, top: float):
    """Raises :func:`cast_features`' error: ``count`` rows of ``name`` overflow ``dtype`` (``first`` listed)."""
    raise InvalidArgumentError(where, arg, dtype_name(dtype),
                               f"a dtype that holds {name}: {count} rows overflow it (e.g. rows "
                               f"{first[:5]}, |value| up to {top:g}); use float32 or bfloat16")


def attr_dtypes(node_attrs: Mapping[Any, Mapping[str, Any]], edge_attrs: Mapping[Any, Mapping[str, Any]],
                feature_dtype: Optional[torch.dtype]) -> Dict[str, Dict[str, Dict[str, str]]]:
    """META.json's ``"attr_dtypes"``: ``{"node": {ntype: {name: dtype}}, "edge": {"src__rel__dst": {...}}}``,
    the dtype every attribute is stored in (``attrs``: the input's tensors or arrays, before the cast)."""
    def names(attrs: Mapping[str, Any]) -> Dict[str, str]:
        return {k: dtype_name(stored_dtype(k, torch_dtype(v), feature_dtype)) for k, v in sorted(attrs.items())}
    return {"node": {t: names(a) for t, a in node_attrs.items()},
            "edge": {M.edge_type_str(e): names(a) for e, a in edge_attrs.items()}}


def finite_range(value: Any, dtype: Optional[torch.dtype] = None) -> Optional[List[float]]:
    """``[min, max]`` of the finite values of ``value`` (a tensor or array, read in chunks of rows), as stored
    in ``dtype`` (default its own); ``None`` when it holds no finite value."""
    n = len(value)  # rows read by slices: an out-of-core reader (NpyRows) never loads the whole array
    row = max(1, int(np.prod(tuple(value.shape[1:])))) if hasattr(value, "shape") else 1
    lo, hi = float("inf"), float("-inf")
    for start in range(0, n, max(1, _RANGE_CHUNK // row)):
        part = value[start:start + max(1, _RANGE_CHUNK // row)]
        part = torch.as_tensor(part if isinstance(part, Tensor) else np.array(part)).reshape(-1)  # a copy (writable)
        part = part[torch.isfinite(part)]
        if part.numel():
            a, b = torch.aminmax(part)
            lo, hi = min(lo, float(a)), max(hi, float(b))
    if lo > hi:
        return None
    if dtype is None:
        return [lo, hi]
    return torch.tensor([lo, hi], dtype=torch.float64).to(dtype).double().tolist()  # the stored extremes


def attr_ranges(node_attrs, edge_attrs, feature_dtype: Optional[torch.dtype]) -> Dict[str, Dict[str, Dict]]:
    """META.json's ``"attr_ranges"``: like :func:`attr_dtypes`, the stored ``[min, max]`` of the finite values
    of every floating attribute (``None``: no finite value)."""
    def ranges(attrs: Mapping[str, Any]) -> Dict[str, Optional[List[float]]]:
        out = {}
        for k, v in sorted(attrs.items()):
            dtype = torch_dtype(v)
            if dtype.is_floating_point:
                out[k] = finite_range(v, stored_dtype(k, dtype, feature_dtype))
        return out
    return {"node": {t: ranges(a) for t, a in node_attrs.items()},
            "edge": {M.edge_type_str(e): ranges(a) for e, a in edge_attrs.items()}}


def attr_shapes(node_attrs, edge_attrs) -> Dict[str, Dict[str, Dict[str, List[int]]]]:
    """META.json's ``"attr_shapes"``: like :func:`attr_dtypes`, the shape of one row of every attribute (``x``:
    ``[num_features]``; a label: ``[]``), which every partition's rows must have."""
    def shapes(attrs: Mapping[str, Any]) -> Dict[str, List[int]]:
        return {k: [int(d) for d in tuple(v.shape)[1:]] for k, v in sorted(attrs.items())}
    return {"node": {t: shapes(a) for t, a in node_attrs.items()},
            "edge": {M.edge_type_str(e): shapes(a) for e, a in edge_attrs.items()}}


def meta_entries(node_attrs, edge_attrs, feature_dtype: Optional[torch.dtype]) -> Dict[str, Any]:
    """The META.json keys of this module: the setting, :func:`attr_dtypes`, :func:`attr_ranges` and
    :func:`attr_shapes`."""
    return {META_SETTING: None if feature_dtype is None else dtype_name(feature_dtype),
            META_DTYPES: attr_dtypes(node_attrs, edge_attrs, feature_dtype),
            META_RANGES: attr_ranges(node_attrs, edge_attrs, feature_dtype),
            META_SHAPES: attr_shapes(node_attrs, edge_attrs)}


def holds(rng: Optional[List[float]], dtype: torch.dtype) -> bool:
    """Whether every finite value in ``rng`` (``[min, max]``) stays finite in ``dtype``."""
    return rng is None or bool(torch.isfinite(torch.tensor(rng, dtype=torch.float64).to(dtype)).all())


def check_batch_dtype(where: str, feature_dtype: Optional[torch.dtype], meta: M.PartitionMeta,
                      local: Mapping[Any, Mapping[str, Tensor]]) -> None:
    """Every feature of the folder fits ``feature_dtype`` (a loader's): by META.json's ``"attr_ranges"``;
    for folders written before them, a cast that narrows the range (e.g. to ``float16``) is checked against
    the rows of ``local`` (``{type label: {name: tensor}}``, this rank's partition: each rank checks its own).

    Raises:
        InvalidArgumentError: from ``where`` naming ``feature_dtype``, the attribute and its range.
    """
    if feature_dtype is None:
        return
    record = meta.extra.get(META_RANGES)
    for label, feats in local.items():
        kind = "edge" if isinstance(label, tuple) else "node"
        key = M.edge_type_str(label) if kind == "edge" else label
        known = record.get(kind, {}).get(key, {}) if isinstance(record, dict) else {}
        for name, value in feats.items():
            if not is_feature(name, value.dtype):
                continue
            if name in known:
                rng, source = known[name], "META.json"
            elif torch.finfo(feature_dtype).max < torch.finfo(value.dtype).max:
                rng, source = finite_range(value), "this partition's rows (META.json records no range)"
            else:
                continue
            if not holds(rng, feature_dtype):
                raise InvalidArgumentError(where, "feature_dtype", dtype_name(feature_dtype),
                                           f"a dtype that holds attribute {name!r} of {key!r}: its finite values "
                                           f"span [{rng[0]:g}, {rng[1]:g}] ({source}), beyond "
                                           f"{dtype_name(feature_dtype)}'s ±{torch.finfo(feature_dtype).max:g}; "
                                           f"use float32 (or {dtype_name(value.dtype)}, the stored dtype)")


def check_stored(pd: PartitionData) -> None:
    """Every attribute of the loaded partition has the dtype and the trailing shape (``x``'s column count, ...)
    META.json records (``attr_dtypes``, ``attr_shapes``; no record: nothing to compare here, ``--verify`` compares
    the partitions of a folder without ``attr_shapes``).

    Raises:
        PartitionFormatError: naming the file, the attribute, its dtype or shape and META's.
    """
    dtypes, shapes = pd.meta.extra.get(META_DTYPES), pd.meta.extra.get(META_SHAPES)
    groups = [(M.node_feats_path(pd.meta.root, pd.part), "node", t, nf.feats) for t, nf in pd.node_feats.items()]
    groups += [(M.edge_feats_path(pd.meta.root, pd.part), "edge", M.edge_type_str(e), ef.feats)
               for e, ef in pd.edge_feats.items()]
    for path, kind, key, feats in groups:
        want_dtype, want_shape = recorded(dtypes, kind, key), recorded(shapes, kind, key)
        for name, value in feats.items():
            if name in want_dtype and dtype_name(value.dtype) != want_dtype[name]:
                raise PartitionFormatError(path, f"attribute {name!r} of {key!r} is {dtype_name(value.dtype)}; "
                                           f"META.json records {want_dtype[name]} (a file from another partitioning?)")
            if name in want_shape and list(value.shape[1:]) != want_shape[name]:
                raise PartitionFormatError(path, f"attribute {name!r} of {key!r} has rows of shape "
                                           f"{list(value.shape[1:])}; META.json records {want_shape[name]} (a file "
                                           "from another partitioning, or rewritten by hand?)")


def recorded(record: Any, kind: str, key: str) -> Dict[str, Any]:
    """META.json's entries for one type (``record[kind][key]``), or none when it has no such record."""
    per_type = record.get(kind, {}) if isinstance(record, dict) else {}
    want = per_type.get(key, {}) if isinstance(per_type, dict) else {}
    return want if isinstance(want, dict) else {}


def batch_value(name: str, value: Any, feature_dtype: Optional[torch.dtype]) -> Any:
    """A batch's attribute in the dtype the model asks for: a feature tensor cast to ``feature_dtype``
    (``None``: as stored); anything else unchanged. A tensor already in that dtype is not copied."""
    if feature_dtype is None or not isinstance(value, Tensor) or not is_feature(name, value.dtype):
        return value
    return value.to(feature_dtype)


__all__ = ["FEATURE_DTYPES", "BATCH_DTYPES", "EXACT_ATTRS", "parse_dtype", "dtype_name", "is_feature",
           "stored_dtype", "cast_features", "attr_dtypes", "attr_ranges", "attr_shapes", "finite_range", "meta_entries",
           "check_stored", "check_batch_dtype", "holds", "batch_value", "recorded"]
