"""Stages 5-6: parse the run's records, define each measured quantity once, judge the gates (never torch)."""
