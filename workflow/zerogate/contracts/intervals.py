"""Intervals on the timing statistics (zerogate.analysis.intervals): what the run statistics,
the gates' verdicts, the registry and ``compare`` carry beside a timing value."""

from __future__ import annotations

from pydantic import Field, model_validator

from zerogate.contracts.base import Record


class Interval(Record):
    """The ends of a statistic's interval, in the unit of the value it brackets."""

    low: float
    high: float

    @model_validator(mode="after")
    def _ordered(self) -> Interval:
        if not self.low <= self.high:
            raise ValueError(f"an interval's low end ({self.low}) is above its high end ({self.high})")
        return self

    def scaled(self, factor: float) -> Interval:
        """The interval of the value times a positive constant (a time over a fixed floor)."""
        return Interval(low=self.low * factor, high=self.high * factor)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


class IntervalBasis(Record):
    """How an interval was made: coverage, method, resampling, and what it covers (in words)."""

    confidence: float = Field(alias="confidence(ratio)")
    method: str
    resamples: int
    seed: int
    repeats: int = Field(alias="repeats(runs)")
    block_lengths: list[float] = Field(alias="mean_block_lengths(steps)")  # one per repeat
    pooling: str
    covers: str


class TimingIntervals(IntervalBasis):
    """The interval of each timing statistic of RunStatistics (the same field names and units); None where
    the statistic has none (not measured, a gap in the records, too few timed steps)."""

    step_time_median_s: Interval | None = Field(alias="step_time_median(s)")
    step_time_p90_s: Interval | None = Field(alias="step_time_p90(s)")
    micro_step_time_median_s: Interval | None = Field(alias="micro_step_time_median(s)")
    tokens_per_s: Interval | None

    def of(self, name: str) -> Interval | None:
        """The interval of RunStatistics field ``name`` (None for a field without one)."""
        return getattr(self, name, None) if name in TIMED_FIELDS else None


# The RunStatistics fields that carry an interval, in the order the report lists them.
TIMED_FIELDS = ("step_time_median_s", "step_time_p90_s", "micro_step_time_median_s", "tokens_per_s")


class GateInterval(Interval):
    """A time gate's interval on its measured value, in the gate's unit, with its coverage and basis."""

    unit: str
    confidence: float = Field(alias="confidence(ratio)")
    repeats: int = Field(alias="repeats(runs)")
    method: str
