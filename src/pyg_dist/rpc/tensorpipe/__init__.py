"""The ``tensorpipe`` transport: ``torch.distributed.rpc`` over TensorPipe (:class:`TensorPipeTransport`), kept
selectable, and :mod:`.abort`, which makes its listener's abort on junk legible. TensorPipe's own channels
(``$PYG_DIST_TENSORPIPE_TRANSPORTS``) are read in :mod:`pyg_dist.rpc.settings`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.rpc.tensorpipe.transport import TensorPipeTransport

_LAZY = {
    # public name: the module that defines it
    "TensorPipeTransport": "pyg_dist.rpc.tensorpipe.transport",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
