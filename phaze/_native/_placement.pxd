# cython: language_level=3
"""Declarations of the placement DP kernel (see _placement.pyx)."""
from libc.stdint cimport int64_t, uint8_t

cdef void solve_one(Py_ssize_t n_widths, Py_ssize_t n_layers,
                    const int64_t* widths, const double* forward_s, const double* backward_s,
                    const double* param_bytes, const double* activation_bytes,
                    const uint8_t* tensor_parallel, const double* edge_bytes,
                    int64_t devices, double memory_bytes, double bandwidth,
                    int64_t microbatches, bint recompute, bint adam,
                    double* out_time, int64_t* out_width, int64_t* out_data_parallel,
                    int64_t* out_stages, int64_t* out_stage_end, int64_t* out_stage_devices,
                    double* out_stage_load, double* out_stage_memory) noexcept nogil
