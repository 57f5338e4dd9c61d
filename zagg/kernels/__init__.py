"""Numba kernels over CSR-style segments of point observations."""
