"""The partitioning a folder holds, as one id every rank and every request can compare.

A pyg_dist folder's id is META's ``fingerprint`` (derived from its files' contents by the partitioner); a
PyG-written folder has none, and its id is a hash of its META.json. Two ranks that opened folders with
different ids would fetch each other's rows by the wrong ids: :func:`~pyg_dist.train.session.dist_session`
stops the job, and an owner refuses a request carrying another id (:mod:`pyg_dist.rpc.callees`).

Example:
    >>> from types import SimpleNamespace
    >>> folder_id(SimpleNamespace(extra={"fingerprint": "ab12"}, root="."))
    'ab12'
"""
from __future__ import annotations

import hashlib

from pyg_dist.errors import PartitionFormatError
from pyg_dist.format.meta import meta_path


def folder_id(meta) -> str:
    """``meta.extra["fingerprint"]``, else ``"meta-"`` + the first 16 hex digits of META.json's sha1."""
    fingerprint = (getattr(meta, "extra", None) or {}).get("fingerprint")
    if fingerprint:
        return str(fingerprint)
    path = meta_path(meta.root)
    try:
        return "meta-" + hashlib.sha1(path.read_bytes()).hexdigest()[:16]
    except OSError as e:
        raise PartitionFormatError(path, f"unreadable ({e.strerror or e})") from None


__all__ = ["folder_id"]
