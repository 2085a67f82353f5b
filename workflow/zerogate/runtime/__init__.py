"""What the planning and the training sides both need, below both: launching processes and the DeepSpeed
launcher, the node layout, the planning-stage worlds, the collective clock, the hardware probe and the
measurement programs that run in their own processes, DeepSpeed's internals and the one training loop every
worker runs."""
