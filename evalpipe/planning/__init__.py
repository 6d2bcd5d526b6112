"""Pure layout and memory planning: vLLM's parallel rules, the memory model, the planner, and
the OOM ladder's step records that the engine writes and reports read."""
