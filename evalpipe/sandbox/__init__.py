"""Isolated execution of model-written programs."""
