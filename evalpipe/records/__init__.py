"""The request/response records every layer speaks: prompts, sampling settings, requests,
completions. Below the engine, so tasks, estimates, reports and the run directory use them
without importing an engine; a new request field is one record here and the engines that
honour it."""
