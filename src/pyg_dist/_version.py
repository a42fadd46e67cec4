"""The version of pyg_dist: its one source (pyproject reads it; ``pyg_dist.__version__`` and the commands
``--version`` print it)."""

__version__ = "0.1.0"
