"""Evaluation tasks: datasets, prompt building and scorers, grouped into categories."""
