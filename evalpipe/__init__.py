"""evalpipe: vLLM-backed evaluation of large open models, sized and submitted as SLURM jobs."""

__version__ = "0.1.0"
