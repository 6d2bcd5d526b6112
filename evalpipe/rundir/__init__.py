"""The run directory: file names, typed records, sample log, lock, fingerprint, shards, sweeps."""
