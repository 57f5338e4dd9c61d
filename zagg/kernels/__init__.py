"""Numba kernels over CSR-style segments of point observations.

May import nothing of zagg but ``kernels`` itself: numba over numpy arrays.
"""
