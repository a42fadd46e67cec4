"""Batches of a PyG ``(FeatureStore, GraphStore)`` pair: one ``multi_get_tensor`` call per batch.

The one-machine loaders sample a store pair through :mod:`pyg_dist.sampler.store_pair` (topology read
once, through the ``GraphStore`` API). Their batch filter asks the feature store ONCE per batch, with one
``TensorAttr`` per (type, attribute): every node attribute of every sampled node type (``x``, ``y``,
``time``, masks...) indexed by ``n_id``, and every edge attribute (a tuple group: an edge type, or
``(None, None)``) indexed by ``e_id``, so a remote or database store answers a batch in one round. The
batch then has the fields of the equivalent ``Data`` / ``HeteroData`` batch (PyG's ``filter_fn``):
``n_id``, ``e_id``, ``batch``, ``num_sampled_nodes`` / ``num_sampled_edges`` and the node or link
metadata.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Dict, List, Tuple

from torch import Tensor

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, as_typed
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.loader import batch as B
from pyg_dist.sampler.messages import FeatureBatch
from pyg_dist.sampler.store_pair import PairView, is_store_pair, pair_view


def _requests(view: PairView, node: Dict, edge: Dict) -> Tuple[List[Any], List[Tuple[bool, Any, str]]]:
    attrs, slots = [], []
    for groups, ids, is_node in ((view.node_attrs, node, True), (view.edge_feats, edge, False)):
        for key, index in ids.items():
            if index is None:
                continue
            for a in groups.get(key, []):
                attrs.append(type(a)(a.group_name, a.attr_name, index))
                slots.append((is_node, key, a.attr_name))
    return attrs, slots


def fetch_pair_features(feature_store, view: PairView, node: Dict[Any, Tensor],
                        edge: Dict[Any, Tensor]) -> FeatureBatch:
    """Rows of the batch's nodes and edges (typed keys) with ONE ``feature_store.multi_get_tensor`` call."""
    attrs, slots = _requests(view, node, edge)
    out = FeatureBatch()
    if not attrs:
        return out
    values = feature_store.multi_get_tensor(attrs)
    if len(values) != len(attrs):
        raise InvalidArgumentError("feature_store.multi_get_tensor", "attrs", f"{len(attrs)} attributes asked",
                                   f"one tensor per attribute, got {len(values)}")
    for attr, (is_node, key, name), value in zip(attrs, slots, values):
        if not isinstance(value, Tensor) or value.dim() == 0 or value.size(0) != attr.index.numel():
            got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise InvalidArgumentError("feature_store.multi_get_tensor", f"{attr.group_name}/{name}", got,
                                       f"{attr.index.numel()} rows, one per id asked (no row may be lost)")
        (out.node if is_node else out.edge).setdefault(key, {})[name] = value
    return out


def _sampled(loader, out) -> Tuple[Any, FeatureBatch]:
    """``out`` after the user's ``transform_sampler_output``, and its rows (one ``multi_get_tensor``)."""
    if loader.transform_sampler_output:
        out = loader.transform_sampler_output(out)
    return out, _features(loader, out)


def _features(loader, out) -> FeatureBatch:
    view = pair_view(type(loader).__name__, loader.data)
    hetero = view.is_hetero
    node = as_typed(out.node, HOMO_NODE, hetero)
    edge = as_typed(out.edge, HOMO_EDGE, hetero) if out.edge is not None else {}
    return fetch_pair_features(loader.data[0], view, node, edge)


def _finish(loader, data):
    return data if loader.transform is None else loader.transform(data)


def uses_pair_filter(loader, sampler) -> bool:
    """Whether ``loader`` builds its batches here: a store pair sampled by a pyg_dist sampler."""
    from pyg_dist.sampler.base import SamplerBase
    return is_store_pair(loader.data) and isinstance(sampler, SamplerBase)


def pair_batch(loader, out, sampler, pair_fn, pyg_fn):
    """A one-machine loader's ``filter_fn``: over a store pair sampled by a pyg_dist sampler
    (:func:`uses_pair_filter`), ``pair_fn`` (the sampled nodes joined with their rows in one ``multi_get_tensor``);
    else PyG's ``pyg_fn``."""
    return pair_fn(loader, out) if uses_pair_filter(loader, sampler) else pyg_fn(loader, out)


def pair_node_batch(loader, out):
    """The node batch of a store pair (:func:`uses_pair_filter`): the sampled nodes joined with their rows (one
    ``multi_get_tensor``), then PyG's batch fields."""
    out, features = _sampled(loader, out)
    md = SimpleNamespace(input_id=out.metadata[0], seed_time=out.metadata[1])
    return _finish(loader, B.node_batch(out, loader.input_data.input_type, md=md, features=features,
                                        cls=loader.custom_cls))


def pair_link_batch(loader, out):
    """The link batch of a store pair (:func:`uses_pair_filter`): the sampled nodes joined with their rows (one
    ``multi_get_tensor``), then PyG's link fields."""
    out, features = _sampled(loader, out)
    triplet = loader.neg_sampling is not None and loader.neg_sampling.is_triplet()
    m = out.metadata
    if triplet:
        md = SimpleNamespace(input_id=m[0], src_index=m[1], dst_pos_index=m[2], dst_neg_index=m[3], seed_time=m[4])
    else:
        md = SimpleNamespace(input_id=m[0], edge_label_index=m[1], edge_label=m[2], edge_label_time=m[3])
    return _finish(loader, B.link_batch(out, loader.input_data.input_type, triplet, md=md, features=features,
                                        cls=loader.custom_cls))


__all__ = ["fetch_pair_features", "pair_batch", "pair_node_batch", "pair_link_batch", "uses_pair_filter"]
