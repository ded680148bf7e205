"""Compiled kernels (Cython). Private: call them through the public modules."""
