"""RULER as a task kind: nvidia-long-context-eval's generators run as processes for the model's
tokenizer (generate.py), its metrics read from source (metrics.py), the kind (kind.py)."""
