"""fp8lab: a research and teaching kit for FP8 attention on GPUs."""

__version__ = "0.1.0"
