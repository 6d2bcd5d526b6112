"""Running an evaluation: runner, streaming loop, replicas, watchdog, merge, server mode, Ray."""
