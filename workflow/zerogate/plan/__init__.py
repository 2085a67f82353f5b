"""Stages 2-3: probe the hardware, render the DeepSpeed config, predict memory and the step floor."""
