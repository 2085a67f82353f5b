"""The prepared model and dataset: ``model/model.json`` (prepare_model) and ``dataset/manifest.json``
(prepare_dataset, beside the token arrays)."""

from __future__ import annotations

from typing import Any, Literal

from zerogate.contracts.base import Artefact, Record


class ModelInfo(Artefact):
    """Where the run's model is, loadable offline: none for a shape-only model (random init), a Hugging
    Face directory otherwise (a GGUF dequantised into one, a hub id resolved from the cache)."""

    CONTRACT = "model_info"

    source: str  # the profile's model.source
    kind: Literal["shape", "hf_dir", "gguf", "hub"]
    directory: str | None
    vocab_size: int | None = None  # a fixed vocabulary (stated, or the pretrained model's)
    model_type: str | None = None
    hidden_size: int | None = None
    num_hidden_layers: int | None = None
    tie_word_embeddings: bool | None = None

    @property
    def pretrained(self) -> bool:
        return self.directory is not None


class SplitStats(Record):
    rows: int
    dropped_too_long: int
    truncated: int
    tokens: int
    loss_tokens: int


class DatasetManifest(Artefact):
    """What prepare_dataset built: the splits' sizes, the tokenizer and template, and the content hash
    (examples, tokenizer, template and token arrays) that provenance records."""

    CONTRACT = "dataset_manifest"

    source: str
    content_sha256: str
    seq_len: int  # the rows' length in tokens (the run spec's)
    splits: dict[str, SplitStats]
    template: str
    tokenizer_directory: str
    vocab_size: int  # the tokenizer's
    pad_token_id: int | None
    eos_token_id: int | None
    model: ModelInfo
    file: dict[str, Any] | None = None  # a user file's facts (path, format, sha256)
    rows_read: int | None = None

    @property
    def builtin(self) -> bool:
        return self.source == "builtin-tasks"
