"""Kernel parameters the config layer also needs, importable without numba."""

#: default t-digest compression: cells of up to this many observations stay loss-free
DEFAULT_DELTA = 512
