"""Stage 7: figures, the versioned HTML report, provenance, the run registry and comparisons (never torch)."""
