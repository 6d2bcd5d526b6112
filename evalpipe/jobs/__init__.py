"""SLURM jobs: job spec, render (pure), preflight, submit and executors."""
