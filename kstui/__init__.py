"""kstui: a terminal pair-programming app that makes an existing CUDA kernel faster."""

__version__ = "0.1.0"
