"""Lowest layer: errors, exit codes, strict config I/O, spans, tables, intervals, provenance."""
