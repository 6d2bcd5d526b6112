"""Inference engines: the Engine protocol, the vLLM implementation and a deterministic fake."""
