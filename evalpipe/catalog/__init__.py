"""What evalpipe knows before a run: presets, GPUs, clusters, model configs, model preparation."""
