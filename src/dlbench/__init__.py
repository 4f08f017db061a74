"""dlbench: fair, reproducible side-by-side benchmarks of deep learning frameworks."""

__version__ = "0.1.0"
