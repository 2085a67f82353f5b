"""The collectives timed between local ranks, and at which sizes: the kinds the communication theory names,
a small message for latency and larger ones for bandwidth, and the calls per batch. The timing itself is
zerogate.runtime.collective_timing's (the probe's measurement program and the gloo benchmark's loop); the
planner derives latency and bandwidth from its raw seconds (zerogate.predict.collectives.figures).
"""

from __future__ import annotations

# The collective kinds the theory uses (zerogate.predict.volume.VOLUME_FACTOR, barrier aside: no payload).
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
# Full-tensor elements (fp32) per call: a small message for latency (two elements per rank), and two larger
# ones for bandwidth (256 KiB and 4 MiB full tensors: the default model's gathers are of that order).
LATENCY_ELEMENTS = 4
BANDWIDTH_ELEMENTS = (1 << 16, 1 << 20)
ELEMENT_BYTES = 4  # float32
# Calls per batch and batches per size: small messages cost ~1 ms with gloo here, 4 MiB ones ~5-10 ms. The
# slowest batch bounds the repeat-to-repeat spread the planner carries into its interval (five batches at the
# larger sizes: the spread of three batches is itself a noisy figure; assumed, the probe's whole timing stays
# under a second here).
LATENCY_BATCH = (8, 12)
BANDWIDTH_BATCH = (3, 5)
