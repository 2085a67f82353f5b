"""Benchmarks that print figures (python -m zerogate.bench.<name>); not part of the test suite."""
