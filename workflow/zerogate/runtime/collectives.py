"""The collectives timed between local ranks, and at which sizes: the kinds the communication theory names,
a small message for latency, larger ones for the line's bandwidth, one far larger (64 MiB), and the calls
per batch. The timing itself is zerogate.runtime.collective_timing's (the probe's measurement
program and the gloo benchmark's loop); the planner derives latency and bandwidth from its raw seconds
(zerogate.predict.collectives.figures).
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
# larger sizes: the spread of three batches is itself a noisy figure; assumed, these sizes' timing stays under
# a second here).
LATENCY_BATCH = (8, 12)
BANDWIDTH_BATCH = (3, 5)
# One full tensor beyond the line's sizes (64 MiB of fp32): the planner prices a rank's volume between the
# line's largest size and this one at the rate the two measured sizes show (zerogate.predict.collectives
# .beyond_line), since a line through cache-resident sizes does not describe messages beyond the last-level
# cache (docs/measurements.md, "The probe's collective line beyond its sizes": 1.1-2.2x the line at 64 MiB on
# gloo on a machine with a 32 MiB last-level cache). Assumed: 64 MiB covers the bucket and partition sizes of
# the runs planned here; it is beyond some hosts' last-level cache (32 MiB there), not every host's (another
# development machine reports 480 MiB of L3 shared by its socket, and there too the 64 MiB calls move their
# bytes slower than the 4 MiB ones: docs/measurements.md, the seventh grid draw). One call per batch, three
# batches, one warm-up call: a call takes 0.03-0.25 s on gloo here; the kinds together add about 2 s to the
# probe.
LARGE_ELEMENTS = 1 << 24
LARGE_BATCH = (1, 3)
LARGE_WARMUP = 1
