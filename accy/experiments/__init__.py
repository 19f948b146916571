"""Experiments: the benchmark suite, sweeps over an executor, result records, reports."""
