"""Benchmark datasets (Who&When) and the evaluation harness for attribution methods."""
