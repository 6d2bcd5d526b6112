"""The command line: one module per verb (`add_arguments(parser)`, `run(args) -> int`), parsing and
printing only.

VERBS names every verb with its one-line help, in `evalpipe --help` order. The top-level parser
is built from it without importing any command module; only the verb that runs imports its
module and adds its flags, so `evalpipe render` does not build `run`'s or `submit`'s options.
"""

from __future__ import annotations

VERBS: dict[str, str] = {
    "presets": "List the model presets with their size, dtype and default layout.",
    "tasks": (
        "List evaluation tasks, suites and task kinds, show their rendered samples, or fetch their "
        "datasets."
    ),
    "models": (
        "Prepare models without a hub (`models prepare NAME`) and list where each preset's is."
    ),
    "plan": "Plan GPUs, tensor/pipeline parallel layout and memory for a preset on a GPU type.",
    "run": (
        "Run an evaluation locally or inside a job: load the model once, run the tasks, checkpoint."
    ),
    "serve": (
        "Serve a preset with vLLM's OpenAI-compatible server (its planned layout and settings)."
    ),
    "check": (
        "Check that a preset's weights, shards, chat template and datasets are ready for a cluster."
    ),
    "merge": "Merge RUN_DIR/shards/*/ (one per array task) into RUN_DIR and write its summary.",
    "site": (
        "Describe this SLURM site: `site detect` writes a cluster profile from what SLURM states."
    ),
    "render": "Print (or write) the sbatch script for a preset on a cluster; submits nothing.",
    "submit": "Size, render, validate (sbatch --test-only) and submit presets as SLURM jobs.",
    "smoke": "Load a preset on its planned layout, answer a prompt, and calibrate the planner.",
    "report": "Leaderboard with confidence intervals, GPU costs, plots and paired run comparisons.",
    "status": "Show the SLURM state of a submitted run or sweep, its progress and its log files.",
    "track": "Upload W&B runs logged offline by `run --track wandb` (wraps `wandb sync`).",
    "sandbox": "Run a Python file in the code sandbox; it passes if it runs to its end cleanly.",
    "monitor": "Record this node's GPUs for a multi-node run whose runner is on another node.",
}
