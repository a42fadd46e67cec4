"""The :class:`Partitioner`: assign, relabel, write, report."""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import torch
from tqdm.auto import tqdm

from pyg_dist import _fsio
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.format import digests as D
from pyg_dist.format import meta as M
from pyg_dist.format.precision import meta_entries
from pyg_dist.format.schema import WEIGHT
from pyg_dist.partition import assign
from pyg_dist.partition.config import PartitionConfig
from pyg_dist.partition.renumber import relabel
from pyg_dist.partition.report import folder_bytes, format_report, quality_stats
from pyg_dist.partition.source import TypedGraph, check_finite, typed_graph, with_feature_dtype
from pyg_dist.partition.writer import (
    check_output,
    estimate_bytes,
    finalize_output,
    prepare_output,
    removed_on_error,
    write_caches,
    write_maps,
    write_parts,
    write_stamps,
)

_WHERE = "Partitioner"
LOG = logging.getLogger("pyg_dist")


class Partitioner:
    """Splits a ``Data`` / ``HeteroData`` into ``num_parts`` partitions on disk.

    Args:
        data: The graph. Every per-node attribute (``x``, ``y``, masks, ...), node ``time``, every
            per-edge attribute (``edge_attr``, ``edge_weight``, ...) and ``edge_time`` is kept.
        num_parts: Number of partitions (machines), ``1 <= num_parts <= number of nodes``.
        method: ``"metis"`` (min cut, multi-constraint balance), ``"random"`` (balanced, seeded),
            ``"supernode"`` (METIS mini-clusters dealt at random) or ``"hybrid"`` (node ownership from
            ``base_method``; every partition also stores the whole topology).
        base_method: Ownership method of ``hybrid`` (``"metis"``, ``"random"`` or ``"supernode"``).
        sub_parts: Trainers per machine for a two-level split (recorded in META as trainer ranges).
        num_clusters: Mini-clusters for ``supernode`` (default ``32 * num_parts``, fewer when that would
            leave clusters under 40 nodes: :func:`~pyg_dist.partition.assign.default_num_clusters`).
        seed: Seed of every random choice, METIS' included.
        ufactor: METIS' allowed imbalance per constraint, in thousandths (30 = 3 %).
        balance: Balance METIS on node count, train/val/test counts and in-degree (else nodes only).
        allow_nonfinite: Keep floating attributes with NaN / inf (reported as a warning); by default
            they are an ``InvalidArgumentError`` naming the attribute and rows.
        recursive: METIS by multilevel recursive bisection instead of k-way (``metis`` and ``hybrid``).
        cache_ratio: Also write each partition's remote-feature cache (``feature_cache.pt``): the remote
            nodes with the most edges into the partition, as many as this fraction of the partition's
            own feature bytes allows (``None``: no cache; see :mod:`pyg_dist.cache`). The stores
            use it with no RPC at start-up.
        cache_topology: With ``cache_ratio``, also write the in-edges of the cached nodes
            (``topology_cache.pt``): the sampler expands them here instead of asking their owner.
        feature_dtype: Store the features (floating node and edge attributes except ``y``, ``edge_label``,
            ``edge_weight`` and times: :mod:`pyg_dist.format.precision`) as ``"float32"``, ``"bfloat16"`` or
            ``"float16"`` (a name or a ``torch.dtype``), cast once here; ``bfloat16`` / ``float16`` halve their
            memory per machine and the bytes of every remote row. ``None``: as given. META.json records the
            dtype of every attribute.

    Example:
        >>> from pyg_dist.datasets import synthetic_graph
        >>> data = synthetic_graph(2000, 8)
        >>> stats = Partitioner(data, 2, method="metis").save("/tmp/demo-2", overwrite=True)  # doctest: +SKIP
        >>> stats["edge_cut"] < 0.5  # doctest: +SKIP
        True
    """

    def __init__(self, data, num_parts: int, method: str = "metis", *, base_method: str = "metis",
                 sub_parts: int = 1, num_clusters: Optional[int] = None, seed: int = 0, ufactor: int = 30,
                 balance: bool = True, recursive: bool = False, allow_nonfinite: bool = False,
                 cache_ratio: Optional[float] = None, cache_topology: bool = False,
                 feature_dtype: Optional[Union[str, torch.dtype]] = None):
        self.config = PartitionConfig(num_parts, method, base_method, sub_parts, num_clusters, seed,
                                      ufactor, balance, recursive, feature_dtype=feature_dtype)
        if cache_ratio is not None and (isinstance(cache_ratio, bool) or not isinstance(cache_ratio, (int, float))
                                        or not 0 < cache_ratio <= 1):
            raise InvalidArgumentError(_WHERE, "cache_ratio", cache_ratio, "None or a fraction in (0, 1]")
        if not isinstance(cache_topology, bool) or (cache_topology and cache_ratio is None):
            raise InvalidArgumentError(_WHERE, "cache_topology", cache_topology, "a bool, True only with cache_ratio")
        self.cache_ratio, self.cache_topology = cache_ratio, cache_topology
        if not isinstance(allow_nonfinite, bool):
            raise InvalidArgumentError(_WHERE, "allow_nonfinite", allow_nonfinite, "a bool")
        graph = typed_graph(data)
        for line in check_finite(graph, allow_nonfinite):
            LOG.warning("Partitioner keeps non-finite values: %s", line)
        self.graph: TypedGraph = with_feature_dtype(graph, self.config.stored_dtype)  # the stored dtypes
        total = self.graph.total_nodes()
        if num_parts * sub_parts > total:
            raise InvalidArgumentError(_WHERE, "num_parts", num_parts,
                                       f"num_parts * sub_parts <= number of nodes ({total})")
        if num_clusters is not None and num_clusters > total:
            raise InvalidArgumentError(_WHERE, "num_clusters", num_clusters, f"<= number of nodes ({total})")

    def assign(self):
        """Partition and trainer share of every node: ``(parts, subs, balance constraints used)``."""
        g, c = self.graph, self.config
        method, used = c.owner_method, []
        if method == "random":
            parts = assign.random_assign(g.num_nodes, c.num_parts, c.seed)
        elif method == "metis":
            parts, used = assign.metis_assign(g, c.num_parts, c.seed, c.ufactor, c.balance, c.recursive)
        else:
            k = c.num_clusters or min(assign.default_num_clusters(c.num_parts, g.total_nodes()), g.total_nodes())
            parts, used = assign.supernode_assign(g, c.num_parts, k, c.seed)
        subs = assign.split_within(g, parts, c.num_parts, c.sub_parts, method, c.seed)
        return parts, subs, used

    def save(self, out: Union[str, Path], overwrite: bool = False, progress: bool = True,
             verbose: bool = False) -> Dict[str, Any]:
        """Partitions and writes the folder ``out``; returns the quality statistics (also in META).

        Raises:
            InvalidArgumentError: ``out`` is a file, or a non-empty folder without ``overwrite``.
            FileWriteError: ``out``'s filesystem has less room than the folder's tensors need (checked before
                anything is written), or a write failed (full disk, permissions): names the file and the cause.
        """
        g, c = self.graph, self.config
        check_output(out, overwrite)
        _fsio.check_free(out, estimate_bytes(g, c.num_parts, c.method == "hybrid"),
                         f"the {c.num_parts} partitions of this graph")
        tmp = prepare_output(out, overwrite)
        with tqdm(total=7, desc="partition", disable=not progress) as bar, removed_on_error(tmp):
            clock = _Clock(bar)
            clock.start(f"assign ({c.owner_method})")
            parts, subs, used = self.assign()
            names, weights = assign.constraint_weights(g)
            clock.start("relabel")
            nodes, edges = relabel(g, parts, subs, c.num_parts, c.sub_parts)
            del parts, subs
            clock.start("write")
            write_parts(tmp, g, nodes, edges, c.num_parts, c.method == "hybrid", progress)
            write_maps(tmp, g, nodes, edges, c.num_parts)
            clock.start("digests")
            files = D.file_digests(tmp, D.listed_paths(tmp, c.num_parts))
            fingerprint = D.folder_fingerprint(files)  # the folder id: derived from the content
            clock.start("stamps")  # and caches: they embed the fingerprint
            if self.cache_ratio is not None:
                write_caches(tmp, g, nodes, edges, c.num_parts, float(self.cache_ratio), fingerprint,
                             self.cache_topology and c.method != "hybrid")
                files.update(D.file_digests(tmp, [r for r in D.listed_paths(tmp, c.num_parts) if r not in files]))
            write_stamps(tmp, fingerprint, nodes, edges, c.num_parts, c.method == "hybrid")
            clock.start("stats")
            stats = quality_stats(g, nodes, edges, c.num_parts, names, weights)
            stats["bytes_per_part"] = [folder_bytes(M.part_dir(tmp, p)) for p in range(c.num_parts)]
            clock.start("meta")
            stats["seconds"], stats["cpu_seconds"] = clock.seconds, clock.cpu_seconds
            cache = None if self.cache_ratio is None else {"policy": "degree", "cache_ratio": self.cache_ratio,
                                                           "topology": self.cache_topology}
            M.write_meta(tmp, build_meta(g, c, tmp, nodes, edges, used, stats, fingerprint, cache, files=files))
            finalize_output(tmp, out)
            clock.start(None)
        if verbose:
            print(format_report(stats))
        return stats


def build_meta(g, c, root, nodes, edges, names: List[str], stats, fingerprint: str,
               feature_cache: Optional[Dict[str, Any]] = None, **extra) -> M.PartitionMeta:
    """The folder's :class:`~pyg_dist.format.meta.PartitionMeta` (shared by the in-memory and the
    out-of-core partitioner): ``c`` its config, ``g`` a ``TypedGraph`` or ``ChunkedGraph``, ``nodes`` /
    ``edges`` per type objects with ``bounds`` (and ``sub_bounds`` / ``within_dst``), ``extra`` more
    ``pyg_dist`` keys (``files``: every file's size and digest, :mod:`pyg_dist.format.digests`)."""
    section = {
        "fingerprint": fingerprint, "seed": c.seed, "ufactor": c.ufactor, "num_clusters": c.num_clusters,
        "constraints": names,
        "within_dst_order": {"__".join(et): eo.within_dst for et, eo in edges.items()},
        "node_feat_keys": {t: sorted(a) for t, a in g.node_attrs.items()},
        "edge_feat_keys": {"__".join(et): sorted(a) for et, a in g.edge_attrs.items()},
        "graph_attrs": g.graph_attrs, "stats": stats, "feature_cache": feature_cache,
        **meta_entries(g.node_attrs, g.edge_attrs, c.stored_dtype), **extra,
    }
    if "files" in extra:
        section.update(files=dict(sorted(extra["files"].items())), files_digest=_fsio.DIGESTS[0])
    return M.PartitionMeta(
        root=Path(root), num_parts=c.num_parts, node_types=g.node_types, edge_types=g.edge_types,
        is_hetero=g.is_hetero, method=c.method, base_method=c.owner_method,
        hybrid=c.method == "hybrid", sub_parts=c.sub_parts, num_nodes=dict(g.num_nodes),
        num_edges={et: g.num_edges(et) for et in g.edge_types},
        node_bounds={t: o.bounds for t, o in nodes.items()},
        edge_bounds={et: o.bounds for et, o in edges.items()},
        sub_node_bounds={t: o.sub_bounds for t, o in nodes.items()},
        node_time_types=[t for t in g.node_types if t in g.node_time],
        edge_time_types=[et for et in g.edge_types if et in g.edge_time],
        weight_types=[et for et in g.edge_types if WEIGHT in g.edge_attrs.get(et, {})], extra=section)


class _Clock:
    """Per-stage wall and CPU seconds, mirrored on a tqdm bar."""

    def __init__(self, bar):
        self.bar, self.seconds, self.cpu_seconds, self._name = bar, {}, {}, None
        self._t, self._c = time.perf_counter(), time.process_time()

    def start(self, name: Optional[str]) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        if self._name is not None:
            key = self._name.split(" ")[0]
            self.seconds[key] = round(now - self._t, 3)
            self.cpu_seconds[key] = round(cpu - self._c, 3)
            self.bar.update()
        self._name, self._t, self._c = name, now, cpu
        if name is not None:
            self.bar.set_postfix_str(name)
