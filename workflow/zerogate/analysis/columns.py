"""The columns of parse_logs' steps table that the statistics read, and the per-rank times the rank balance
derives from them (zerogate.analysis.rank_balance): one spelling of every name, units in the key
(``step_time(s)``, ``memory/device_peak(GiB)``)."""

from __future__ import annotations

from zerogate.contracts.records import column

# The steps table's columns the statistics read: the StepRecord's keys (zerogate.contracts.records).
STEP_TIME = column("step_time_s")


MICRO_STEP_TIME = column("micro_step_time_s")


TOKENS_PER_S = column("tokens_per_s")


DEVICE_PEAK = column("device_peak_gib")


LOSS = column("loss")


LOSS_SCALE = column("loss_scale")


SKIP_REASON = column("skip_reason")


UPDATE_APPLIED = column("update_applied")


# A rank's host time inside collectives per optimizer step, and what the analysis derives from it (see
# "Compute, communication and wait per rank").
COLLECTIVES_TIME = column("collectives_s")


COMPUTE = "compute(s)"


COMMUNICATION = "communication(s)"


WAIT = "wait(s)"
