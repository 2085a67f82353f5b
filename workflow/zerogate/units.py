"""Byte units, defined once. Memory is logged in GiB (2**30 bytes); GB means 10**9 bytes."""

GIB = 1024**3
GB = 10**9
