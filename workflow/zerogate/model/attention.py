"""Whether a model's architecture can use the profile's attention implementation (``model.attention``),
decided when the profile is loaded, from what the installed transformers declares, so an unsupported one
stops before any job with one line instead of a traceback when the model is built.

transformers decides it when it builds the model (transformers/modeling_utils.py,
``PreTrainedModel.get_correct_attn_implementation``): "eager" is always valid; a requested "sdpa" calls
``_sdpa_can_dispatch``, which raises "does not support an attention implementation through
torch.nn.functional.scaled_dot_product_attention" unless the class's ``_supports_sdpa`` is true (the flag
defaults to False on ``PreTrainedModel``, and each architecture's ``*PreTrainedModel`` sets it: Gemma-2's is
False, "sdpa does not support softcapping"). The class is the one ``AutoModelForCausalLM`` builds for the
config's ``model_type`` (transformers/models/auto/modeling_auto.py, ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``;
a tuple there is resolved by the config's ``architectures``, as transformers/models/auto/auto_factory.py
``_get_model_class`` does).

The flag is read from the class's source in the installed package (its class body, then its bases', through
the module's imports), without importing the modeling module: importing one loads transformers'
modeling_utils, seconds on every workflow load. Where the source does not settle it (a base this reading
cannot follow), the class is imported and asked.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

from zerogate.config.base import Where, anywhere
from zerogate.config.model_data import ModelSettings
from zerogate.errors import InputError
from zerogate.model.hf_config import config_file, load_config
from zerogate.model.sources import parse_source

# The class attribute that declares each implementation the profile may choose (zerogate.config.model_data
# ATTENTIONS); eager needs none (modeling_utils.get_correct_attn_implementation accepts it always).
FLAGS = {"sdpa": "_supports_sdpa"}


class _Unsettled(Exception):
    """The source alone does not say (a base this reading cannot follow)."""


def _transformers_dir() -> Path:
    # Here, not at the top: transformers is imported only when a profile's model is checked.
    import transformers

    return Path(transformers.__file__).parent


def causal_lm_class(model_type: str, architectures: list[str] | None = None) -> str:
    """The name of the class ``AutoModelForCausalLM`` builds for ``model_type``."""
    # Here, not at the top: the names alone; this module loads no model code.
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    names = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    if isinstance(names, str):
        return names
    return next((a for a in architectures or () if a in names), names[0])


@functools.lru_cache(maxsize=64)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _module_file(importer: Path, module: str | None, level: int) -> Path | None:
    """The file of ``from <level dots><module> import ...`` in ``importer``; None outside transformers."""
    root = _transformers_dir()
    if level:
        base = importer.parent
        for _ in range(level - 1):
            base = base.parent
    elif module and (module == "transformers" or module.startswith("transformers.")):
        base = root.parent
    else:
        return None
    target = base.joinpath(*(module or "").split(".")) if module else base
    for candidate in (target.with_suffix(".py"), target / "__init__.py"):
        if candidate.is_file() and root in candidate.parents:
            return candidate
    return None


def _imported(tree: ast.Module, name: str) -> ast.ImportFrom | None:
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return node
    return None


def _class_def(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _own_value(node: ast.ClassDef, flag: str) -> bool | None:
    """The flag as the class body sets it (``flag = True``, ``a = flag = True``, ``flag: bool = False``)."""
    for statement in node.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        if isinstance(statement, ast.AnnAssign):
            targets = [statement.target]
        value = getattr(statement, "value", None)
        named = any(isinstance(t, ast.Name) and t.id == flag for t in targets)
        if named and isinstance(value, ast.Constant) and isinstance(value.value, bool):
            return value.value
        if named:
            raise _Unsettled(f"{node.name}.{flag} is not a literal")
    return None


def declared(module: Path, class_name: str, flag: str) -> bool | None:
    """``flag`` as ``class_name`` in ``module`` (a file of transformers) declares it or inherits it, bases
    searched left to right; None when no class in its ancestry sets it."""
    tree = _tree(module)
    node = _class_def(tree, class_name)
    if node is None:
        raise _Unsettled(f"no class {class_name} in {module}")
    own = _own_value(node, flag)
    if own is not None:
        return own
    for base in node.bases:
        if not isinstance(base, ast.Name):
            raise _Unsettled(f"base {ast.unparse(base)} of {class_name}")
        if _class_def(tree, base.id) is not None:
            found = declared(module, base.id, flag)
        else:
            source = _imported(tree, base.id)
            if source is None:
                raise _Unsettled(f"base {base.id} of {class_name} is neither defined nor imported")
            file = _module_file(module, source.module, source.level)
            if file is None:  # a class from outside transformers (torch's, say) declares none of its flags
                continue
            original = next(a.name for a in source.names if (a.asname or a.name) == base.id)
            found = declared(file, original, flag)
        if found is not None:
            return found
    return None


def _class_file(model_type: str, class_name: str) -> Path:
    """The modeling file of ``model_type``'s folder that defines ``class_name``."""
    # Here, not at the top: the folder's name, without importing the model's code.
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    folder = _transformers_dir() / "models" / Path(*model_type_to_module_name(model_type).split("."))
    for file in sorted(folder.glob("modeling_*.py")):
        if _class_def(_tree(file), class_name) is not None:
            return file
    raise _Unsettled(f"no modeling file of {folder} defines {class_name}")


def supports(model_type: str, attention: str, architectures: list[str] | None = None) -> bool:
    """Whether the installed transformers builds ``model_type``'s causal LM with ``attention``."""
    flag = FLAGS.get(attention)
    if flag is None:
        return True
    class_name = causal_lm_class(model_type, architectures)
    try:
        return bool(declared(_class_file(model_type, class_name), class_name, flag))
    except _Unsettled:
        return bool(getattr(_imported_class(model_type, class_name), flag, False))


def _imported_class(model_type: str, class_name: str) -> Any:
    """The class itself, found as AutoModelForCausalLM finds it (auto_factory's lazy mapping)."""
    # Here, not at the top: only where the source does not settle the flag (seconds: modeling_utils).
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    found = MODEL_FOR_CAUSAL_LM_MAPPING[CONFIG_MAPPING[model_type]]
    return next(
        c for c in (found if isinstance(found, (list, tuple)) else (found,)) if c.__name__ == class_name
    )


def check_attention(
    attention: str, model_type: str, architectures: list[str] | None, named_by: str, file: str
) -> None:
    """InputError naming ``file`` (the profile file that sets ``model.attention``) and the key when the
    installed transformers cannot build ``model_type``'s causal LM (``named_by``: what says it is that
    model) with ``attention``."""
    if supports(model_type, attention, architectures):
        return
    # Here, not at the top: the version, for the message.
    import transformers

    class_name = causal_lm_class(model_type, architectures)
    raise InputError(
        file,
        "model.attention",
        f"{attention!r} is not supported by {class_name} ({named_by}) in transformers "
        f"{transformers.__version__} ({class_name}.{FLAGS[attention]} is False): use eager",
    )


def check_model_attention(model: ModelSettings, repo: str | Path, where: Where = anywhere) -> None:
    """The profile's ``model.attention`` against its model, named by a ``model.config`` or by the
    ``config.json`` of a local model directory (``model.source``); InputError naming the file ``where``
    gives for ``model.attention``. A model built from shape keys alone is one of
    zerogate.config.model_data.SHAPE_ARCHITECTURES, whose classes support every implementation a profile
    may choose in the installed transformers (tests/unit/test_attention.py asks transformers' source): it is
    not asked here, which would load transformers into every workflow load for an answer that is known."""
    if model.attention not in FLAGS:
        return
    if model.config is not None:
        file, named_by = config_file(model.config), f"model.config {model.config}"
    else:
        try:
            source = parse_source(model.source, repo)
        except (
            FileNotFoundError
        ):  # refused, naming model.source, by zerogate.model.sources.check_model_source
            return
        if source.kind != "hf_dir":
            return
        file, named_by = Path(source.location), f"model.source {model.source}"
    config = load_config(file)
    check_attention(
        model.attention, config.model_type, config.architectures, named_by, where("model.attention")
    )
