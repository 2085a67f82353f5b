"""DeepSpeed's defaults as zerogate takes them: read from DeepSpeed's own config classes once, kept beside the
key table, and read back without loading DeepSpeed."""

import json
import subprocess
import sys

from deepspeed.runtime.engine import MEMORY_OPT_ALLREDUCE_SIZE
from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
from deepspeed.runtime.zero.leaf_module_config import DEFAULT_LEAF_MODULE_CLASSES
from deepspeed.runtime.zero.offload_config import (
    DeepSpeedZeroOffloadOptimizerConfig,
    DeepSpeedZeroOffloadParamConfig,
)

from zerogate.contracts.model import ModelCounts
from zerogate.predict import setup as predict_setup
from zerogate.predict.comms import TheoryInputs, theory
from zerogate.render import ds_keys
from zerogate.render.cpu_tuning import cpu_comm_overrides, untuned_overrides
from zerogate.render.deepspeed_defaults import (
    _TABLE_LAYOUT,
    ZERO0_ALLREDUCE_ELEMENTS,
    deepspeed_defaults,
    defaults_table,
    table_from_deepspeed,
)


def test_the_defaults_are_deepspeeds_own():
    zero, param, optimizer = (
        DeepSpeedZeroConfig(),
        DeepSpeedZeroOffloadParamConfig(),
        DeepSpeedZeroOffloadOptimizerConfig(),
    )
    defaults = deepspeed_defaults()
    assert defaults.reduce_bucket_size == zero.reduce_bucket_size
    assert defaults.prefetch_bucket_size == zero.prefetch_bucket_size
    assert defaults.param_persistence_threshold == zero.param_persistence_threshold
    assert defaults.max_live_parameters == zero.max_live_parameters
    assert defaults.max_reuse_distance == zero.max_reuse_distance
    assert defaults.sub_group_size == zero.sub_group_size
    assert (defaults.param_buffer_count, defaults.param_buffer_size) == (
        param.buffer_count,
        param.buffer_size,
    )
    assert defaults.optimizer_buffer_count == optimizer.buffer_count
    assert defaults.leaf_module_classes == tuple(DEFAULT_LEAF_MODULE_CLASSES)
    assert ZERO0_ALLREDUCE_ELEMENTS == MEMORY_OPT_ALLREDUCE_SIZE


def test_the_theory_and_the_cpu_tuning_take_deepspeeds_defaults():
    zero = DeepSpeedZeroConfig()
    inputs = TheoryInputs(accumulation=1, world=2, dtype_bytes=4, persistence_threshold=0)
    assert (inputs.reduce_bucket_elements, inputs.prefetch_bucket_elements, inputs.max_reuse_distance) == (
        zero.reduce_bucket_size,
        zero.prefetch_bucket_size,
        zero.max_reuse_distance,
    )
    # ZeRO-0 all-reduces the flat gradients in buckets of MEMORY_OPT_ALLREDUCE_SIZE elements.
    numels = (MEMORY_OPT_ALLREDUCE_SIZE, 1)
    over_one_bucket = ModelCounts(
        total=sum(numels),
        largest_layer=max(numels),
        numels=numels,
        hidden=1,
        layers=1,
        heads=1,
        vocab=1,
        tied_embeddings=False,
    )
    reduced = next(t for t in theory(over_one_bucket, "zero0", inputs) if t.name == "gradient all-reduce")
    assert reduced.calls == 2
    tuned = {o["path"]: o["value"] for o in cpu_comm_overrides("llama")}
    assert tuned["zero_optimization.reduce_bucket_size"] == zero.reduce_bucket_size
    assert tuned["zero_optimization.stage3_prefetch_bucket_size"] == zero.prefetch_bucket_size
    assert tuned["zero_optimization.leaf_module.classes"] == [
        *DEFAULT_LEAF_MODULE_CLASSES,
        "LlamaDecoderLayer",
    ]
    untuned = {o["path"]: o["value"] for o in untuned_overrides(64)}
    assert untuned["zero_optimization.leaf_module.classes"] == list(DEFAULT_LEAF_MODULE_CLASSES)


def test_a_setup_left_without_them_takes_deepspeeds_defaults():
    setup = predict_setup.Setup(
        ranks=2,
        nodes=1,
        dtype="fp16",
        device_kind="cuda",
        micro_batch=1,
        seq_len=64,
        accumulation=1,
        stage=3,
        offload_optimizer=False,
        offload_param=False,
        pin_memory=False,
        reduce_bucket=1,
        prefetch_bucket=1,
        persistence_threshold=1,
    )
    defaults = deepspeed_defaults()
    assert (setup.max_reuse_distance, setup.max_live_parameters, setup.sub_group_size) == (
        defaults.max_reuse_distance,
        defaults.max_live_parameters,
        defaults.sub_group_size,
    )
    assert (
        setup.param_swap_buffer_count,
        setup.param_swap_buffer_size,
        setup.optimizer_swap_buffer_count,
    ) == (
        defaults.param_buffer_count,
        defaults.param_buffer_size,
        defaults.optimizer_buffer_count,
    )


def test_the_table_is_kept_and_read_back_without_importing_deepspeed(tmp_path):
    assert defaults_table() == json.loads(json.dumps(table_from_deepspeed()))
    kept = ds_keys.cache_file(str(tmp_path), "defaults", _TABLE_LAYOUT)
    assert kept is not None and kept.parent == tmp_path / "zerogate-cache" and "-defaults-" in kept.name
    assert kept != ds_keys.cache_file(str(tmp_path))  # the key table is another file
    # A process whose environment keeps the table reads the defaults without loading DeepSpeed (or torch).
    probe = (
        "import sys; from zerogate.render.deepspeed_defaults import deepspeed_defaults; "
        "print(deepspeed_defaults().reduce_bucket_size); "
        "assert 'deepspeed' not in sys.modules and 'torch' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(DeepSpeedZeroConfig().reduce_bucket_size)
