"""Stage 4: the ZeRO-3 training run under the deepspeed launcher (torch; never pandas)."""
