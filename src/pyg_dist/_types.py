"""Type aliases and the homo <-> hetero boundary.

Inside pyg_dist every graph is typed: a homogeneous graph is the heterogeneous graph with one node type
``"_N"`` and one edge type ``("_N", "_E", "_N")``. Convert only at the public boundary, with
:func:`as_typed` on the way in and :func:`untyped` on the way out.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple, TypeVar, Union, cast

from torch import Tensor

NodeType = str
EdgeType = Tuple[str, str, str]
#: Node type of a homogeneous graph, seen from inside.
HOMO_NODE: NodeType = "_N"
#: Edge type of a homogeneous graph, seen from inside.
HOMO_EDGE: EdgeType = (HOMO_NODE, "_E", HOMO_NODE)

T = TypeVar("T")
TypedDict = Dict[Union[NodeType, EdgeType], T]


def as_typed(value: Optional[Union[T, Mapping]], key: Union[NodeType, EdgeType],
             is_hetero: bool) -> Dict:
    """Wraps a homogeneous value as ``{key: value}``; passes a hetero dict through (as a plain dict).

    ``None`` becomes ``{}``.
    """
    if value is None:
        return {}
    if is_hetero:
        return dict(cast(Mapping, value))
    return {key: value}


def untyped(value: Mapping, key: Union[NodeType, EdgeType], is_hetero: bool):
    """Inverse of :func:`as_typed`: returns the dict for hetero, or the single value (or ``None``)."""
    if is_hetero:
        return dict(value)
    return value.get(key)


def edge_type_str(edge_type: EdgeType) -> str:
    """``("a", "to", "b")`` -> ``"a__to__b"`` (used in file names)."""
    return "__".join(edge_type)


def str_edge_type(name: str) -> EdgeType:
    """Inverse of :func:`edge_type_str`."""
    parts = tuple(name.split("__"))
    if len(parts) != 3:
        raise ValueError(f"edge type string {name!r} is not of the form 'src__rel__dst'")
    return parts


def is_tensor_dict(value) -> bool:
    """True when ``value`` is a mapping whose values are tensors."""
    return isinstance(value, Mapping) and all(isinstance(v, Tensor) for v in value.values())
