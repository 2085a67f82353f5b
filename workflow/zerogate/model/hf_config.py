"""Any Hugging Face causal LM from its ``config.json``: the transformers config, and its shape in one record.

``load_config`` reads the file offline and picks the config class from its ``model_type`` through
transformers' auto mapping (never the hub, never pattern matching on the file name: a file without a
``model_type`` is refused). ``shape_of`` reads the numbers the ledger and the activation trace need
through transformers' attribute maps, so GPT-2's ``n_embd``/``n_layer``/``n_head`` and Llama's
``hidden_size``/``num_hidden_layers``/``num_attention_heads`` answer to the same names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerogate.errors import InputError

CONFIG_FILE = "config.json"
# Relative config paths are relative to the repository (as every path a profile states), whatever the cwd.
REPOSITORY = Path(__file__).resolve().parents[3]


def config_file(stated: str | Path) -> Path:
    """A profile's ``model.config`` as a path: absolute as given, else under the repository."""
    path = Path(stated)
    return path if path.is_absolute() else REPOSITORY / path


def load_config(path: str | Path) -> Any:
    """The transformers ``PretrainedConfig`` of ``path`` (a ``config.json`` or a directory holding one).

    Raises InputError naming the file (and the key) when the file is missing, is not a JSON object, has no
    or an unknown ``model_type``, names an architecture without a causal LM, or transformers rejects a value.
    """
    # Here, not at the top: the Snakefile imports this module when it loads a profile
    # (zerogate.config.profile), and needs transformers only for a profile that names a config file.
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    file = Path(path) / CONFIG_FILE if Path(path).is_dir() else Path(path)
    if not file.is_file():
        raise InputError(str(file), "", "no such file")
    try:
        data = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InputError(str(file), "", f"not JSON ({_one_line(error)})") from None
    if not isinstance(data, dict):
        raise InputError(str(file), "", f"not a JSON object but a {type(data).__name__}")
    model_type = data.get("model_type")
    if not model_type:
        raise InputError(str(file), "model_type", "missing: it names the transformers architecture")
    if model_type not in CONFIG_MAPPING:
        custom = " (custom code in auto_map is never run)" if "auto_map" in data else ""
        raise InputError(
            str(file),
            "model_type",
            f"'{model_type}' is not an architecture of transformers {transformers.__version__}{custom}",
        )
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise InputError(
            str(file), "model_type", f"'{model_type}' has no causal language model in transformers"
        )
    try:
        config = CONFIG_MAPPING[model_type].from_dict(data)
    except (
        Exception
    ) as error:  # transformers' strict dataclasses raise their own types; all are bad input here
        key, problem = _rejected_key(error)
        raise InputError(str(file), key, f"transformers rejects it: {problem}") from None
    # Where it came from, for later messages (PretrainedConfig keeps it as name_or_path).
    config._name_or_path = str(file)
    return config


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _rejected_key(error: BaseException) -> tuple[str, str]:
    """The config key transformers names in its validation error (field or first `backticked` name), if
    any."""
    text = str(error)
    named = re.search(r"field '([^']+)'", text) or re.search(r"`([A-Za-z_][A-Za-z0-9_]*)`", text)
    return (named.group(1) if named else ""), _one_line(error)


@dataclass(frozen=True)
class ModelShape:
    """The shape numbers of a causal LM, under one set of names for every architecture."""

    model_type: str
    hidden_size: int
    layers: int
    attention_heads: int
    kv_heads: int  # key/value heads (grouped-query attention); = attention_heads without GQA
    head_dim: int
    intermediate_size: int  # the MLP's inner width
    vocab_size: int
    tied_embeddings: bool  # lm_head shares the input embedding
    max_positions: int


def shape_of(config: Any) -> ModelShape:
    """``config``'s shape. Reads through transformers' attribute maps (GPT-2: n_embd, n_layer, n_head,
    n_positions).

    head_dim is the config's own where it states one (Llama 3, Mistral), else hidden / heads. The MLP width
    is ``intermediate_size``, or GPT-2's ``n_inner``, which GPT-2's MLP replaces by 4 x hidden when it is None
    (transformers' modeling_gpt2.GPT2Block), or OPT's ``ffn_dim`` (modeling_opt.OPTDecoderLayer: fc1 maps
    hidden to ffn_dim); GPT-Neo's ``intermediate_size`` of None is 4 x hidden too
    (modeling_gpt_neo.GPTNeoBlock ``inner_dim``). InputError naming the config file and key for a missing
    number.
    """
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    source = getattr(config, "name_or_path", "") or f"{type(config).__name__}"

    def number(name: str) -> int:
        value = getattr(text, name, None)
        if not isinstance(value, int) or isinstance(value, bool):
            raise InputError(source, name, f"needs an integer, the config has {value!r}")
        return value

    hidden, heads = number("hidden_size"), number("num_attention_heads")
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or hidden // heads
    if getattr(text, "intermediate_size", None) is not None:
        intermediate = number("intermediate_size")
    elif hasattr(text, "n_inner"):
        intermediate = text.n_inner if text.n_inner is not None else 4 * hidden
    elif getattr(text, "ffn_dim", None) is not None:
        intermediate = number("ffn_dim")
    elif getattr(config, "model_type", "") == "gpt_neo":
        intermediate = 4 * hidden
    else:
        raise InputError(
            source, "intermediate_size", "missing (and no n_inner or ffn_dim): the MLP width is unknown"
        )
    return ModelShape(
        model_type=str(getattr(config, "model_type", "")),
        hidden_size=hidden,
        layers=number("num_hidden_layers"),
        attention_heads=heads,
        kv_heads=int(kv_heads),
        head_dim=int(head_dim),
        intermediate_size=int(intermediate),
        vocab_size=number("vocab_size"),
        tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        max_positions=number("max_position_embeddings"),
    )
