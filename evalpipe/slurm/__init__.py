"""Talking to SLURM: argv builders, the client (the only subprocess), scontrol parsing, sites."""
