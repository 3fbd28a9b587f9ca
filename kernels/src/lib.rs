//! Collective kernels.
