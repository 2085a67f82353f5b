"""Stage 1, prepare_dataset: the instruction dataset, tokenizer and prompt templates."""
