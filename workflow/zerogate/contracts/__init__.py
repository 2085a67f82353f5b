"""Typed contracts of every file that passes from one rule to another (zerogate.contracts.base)."""
