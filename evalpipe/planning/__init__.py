"""Pure layout and memory planning: vLLM's parallel rules, the memory model, the planner."""
