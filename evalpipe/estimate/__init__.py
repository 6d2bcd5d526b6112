"""Cost estimates: work model, throughput, calibration, history, shard and time choice (pure)."""
