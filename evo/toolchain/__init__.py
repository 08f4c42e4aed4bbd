"""The CUDA toolchain: nvcc builds, ptxas reports, machine-code digests, nvidia-smi queries."""
