"""How a prepared job reaches SLURM, by executor name (the CLI's --executor choices).

Light at import time: the CLI builds its parser from EXECUTORS on every start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from evalpipe.core.errors import ConfigError
from evalpipe.rundir.layout import RunDir

if TYPE_CHECKING:
    from evalpipe.jobs.prepare import Prepared
    from evalpipe.slurm.client import SlurmClient

# How a prepared job reaches SLURM: (job id, the command lines that ran, merge job id).
Submitted = tuple[str, list[list[str]], str | None]


def _by_sbatch(prepared: Prepared, client: SlurmClient) -> Submitted:
    files = RunDir(prepared.run_dir)
    for script in prepared.test_only_scripts():
        client.test_only(script)
    job_id = client.submit(files.job_script)
    merge_id = None
    if prepared.merge_script is not None:
        merge_id = client.submit(files.merge_script, dependency=f"afterany:{job_id}")
    return job_id, prepared.argv(job_id), merge_id


def _by_submitit(prepared: Prepared, client: SlurmClient) -> Submitted:
    spec = prepared.spec
    if spec.options.shards > 1 or spec.multi_node:
        raise ConfigError(
            "The submitit executor runs single-node, unsharded jobs; this one has "
            f"{spec.nodes} node(s) and {spec.options.shards} shard(s). Use the default sbatch "
            "executor."
        )
    from evalpipe.jobs.submitit_exec import submit_with_submitit

    script = RunDir(prepared.run_dir).job_script  # a copy of the script submitit wrote
    return submit_with_submitit(spec, copy_script_to=script), [["sbatch", str(script)]], None


# Executors by name; the CLI's --executor choices come from here. submitit writes its own
# script, so only sbatch records evalpipe's.
EXECUTORS: dict[str, Callable[[Prepared, SlurmClient], Submitted]] = {
    "sbatch": _by_sbatch,
    "submitit": _by_submitit,
}
