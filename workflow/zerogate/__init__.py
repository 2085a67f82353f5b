"""zerogate: reproduce, measure and gate published claims about DeepSpeed ZeRO-3 fine-tuning."""

__version__ = "0.1.0"
