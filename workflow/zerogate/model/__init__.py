"""The model: where it comes from (shape, HF directory, GGUF, hub) and how it is built."""
