"""The JSON schemas Snakemake validates against are generated from the settings models: the committed files
are what the models generate, the schemas fill in only the defaults meant for the hashed profile, and the
schema and the model refuse the same files (the model's errors one line naming the file and the key)."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
import yaml
from snakemake.utils import validate

from tests.conftest import REPO
from zerogate.config import schemas
from zerogate.config.base import Int, Settings, in_file, setting
from zerogate.config.claims import ClaimsFile, claims_file
from zerogate.config.profile import load_profile_chain, resolve_profile
from zerogate.config.run_config import RunConfig, run_config
from zerogate.config.settings import ProfileSettings, profile_settings
from zerogate.errors import InputError


@pytest.mark.parametrize("name", sorted(schemas.SCHEMAS))
def test_the_committed_schema_is_the_generated_one(name):
    committed = (schemas.SCHEMA_DIR / name).read_text()
    assert committed == schemas.schema_text(name, schemas.SCHEMAS[name]), (
        f"config/schemas/{name} differs from its model: python -m zerogate.config.schemas --write"
    )


def test_a_stale_schema_is_found_and_a_model_is_added_to_the_registry(tmp_path, monkeypatch):
    class Extra(Settings):
        """A file another model describes."""

        runs: Int = setting("how many", 1, filled=True, ge=1)

    monkeypatch.setitem(schemas.SCHEMAS, "extra.schema.json", Extra)
    assert schemas.main(["--write", "--directory", str(tmp_path)]) == 0
    assert schemas.stale(tmp_path) == []
    extra = json.loads((tmp_path / "extra.schema.json").read_text())
    assert extra["properties"]["runs"] == {
        "description": "how many",
        "type": "integer",
        "minimum": 1,
        "default": 1,
    }
    (tmp_path / "profile.schema.json").write_text("# edited by hand\n")
    assert schemas.stale(tmp_path) == ["profile.schema.json"]
    assert schemas.main(["--check", "--directory", str(tmp_path)]) == 1


def _defaults(schema, path=()):
    """(dotted path, default) of every default the schema states (a list's items and conditional
    branches included)."""
    found = {}
    for name, sub in schema.get("properties", {}).items():
        if "default" in sub:
            found[".".join((*path, name))] = sub["default"]
        found.update(_defaults(sub, (*path, name)))
    branches = [schema[k] for k in ("items", "then", "else") if k in schema]
    branches += [b for k in ("allOf", "anyOf") for b in schema.get(k, [])]
    for branch in branches:
        found.update(_defaults(branch, path))
    return found


def _filled(model, path=()):
    """(dotted path, default) of every field marked filled, through the nested settings models."""
    found = {}
    for name, field in model.model_fields.items():
        if in_file(field).filled:
            found[".".join((*path, name))] = field.get_default(call_default_factory=True)
        nested = [
            a for a in getattr(field.annotation, "__args__", (field.annotation,)) if isinstance(a, type)
        ]
        for sub in nested:
            if issubclass(sub, Settings):
                found.update(_filled(sub, (*path, name)))
    return found


def test_the_schemas_fill_in_only_the_defaults_marked_filled():
    """Snakemake writes a schema's defaults into the profile it validates, and the run's hash is taken of
    that profile: only the keys the profile schema always filled are filled."""
    profile = _defaults(schemas.json_schema(ProfileSettings))
    assert profile == _filled(ProfileSettings)
    assert profile == {
        "model.source": "shape",
        "model.attention": "sdpa",
        "dataset.template": "auto",
        "intervals.confidence": 0.95,
        "intervals.resamples": 2000,
        "intervals.seed": 0,
        "nodes.ranks_per_node": 1,
        "nodes.mode": "no_ssh",
        "nodes.master_addr": "127.0.0.1",
        "nodes.collective_timeout_s": 300,
    }
    assert _defaults(schemas.json_schema(RunConfig)) == _filled(RunConfig)
    assert _defaults(schemas.json_schema(ClaimsFile)) == {}


def _tiny():
    chain = load_profile_chain(REPO / "config/profiles", "cpu-tiny", "config/config.yaml", "profile")
    return resolve_profile(chain)


def _set(profile, dotted, value):
    node = profile
    *parents, last = dotted.split(".")
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[last] = value
    return profile


# Profiles one key away from cpu-tiny that the schema refuses: the model refuses each too, naming the key.
REFUSED = [
    ("training.lr_warmup_steps", 0, "training.lr_warmup_steps"),
    ("training.optimizer.type", "SGD", "training.optimizer.type"),
    ("training.optimizer.betas", [0.9], "training.optimizer.betas"),
    ("dataset.tasks", ["sort", "sort"], "dataset.tasks"),
    ("dataset.seq_len", 4, "dataset.seq_len"),
    ("model.hidden_sise", 64, "model.hidden_sise"),
    ("stabiliser.spike_window", 2, "stabiliser.spike_window"),
    ("intervals.confidence", 1.5, "intervals.confidence"),
    ("intervals.resamples", 10, "intervals.resamples"),
    ("deepspeed.overrides", [{"path": "a b", "value": 1, "reason": "x"}], "deepspeed.overrides.0.path"),
    ("deepspeed.overrides", [{"path": "a", "value": 1}], "deepspeed.overrides.0.reason"),
    ("nodes", {"mode": "ssh"}, "nodes.mode"),
    ("nodes", {"master_port": 80}, "nodes.master_port"),
    ("variants", ["zero3", "zero3"], "variants"),
    ("variants", ["zero4"], "variants.0"),
    ("gates.0.statistic", "mean", "gates.0.statistic"),
    ("gates.0.name", "Step Time", "gates.0.name"),
    ("repeats", 0, "repeats"),
    ("preflight", {"min_devices": 0}, "preflight.min_devices"),
    ("checkpoint.keep", True, "checkpoint.keep"),
]


@pytest.mark.parametrize(("key", "value", "named"), REFUSED)
def test_the_schema_and_the_model_refuse_the_same_profiles(key, value, named):
    schema = schemas.json_schema(ProfileSettings)
    profile = _set(_tiny(), key, value)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(copy.deepcopy(profile), schema)
    with pytest.raises(InputError) as error:
        profile_settings(profile, lambda dotted: "config/profiles/mine.yaml")
    assert error.value.file == "config/profiles/mine.yaml" and error.value.key == named
    assert "\n" not in str(error.value)


def test_every_real_profile_passes_the_schema_and_the_model():
    schema = schemas.json_schema(ProfileSettings)
    for path in sorted((REPO / "config/profiles").glob("*.yaml")):
        chain = load_profile_chain(REPO / "config/profiles", path.stem, "config/config.yaml", "profile")
        profile = resolve_profile(chain)
        jsonschema.validate(copy.deepcopy(profile), schema)
        profile_settings(profile)


def test_a_whole_number_keeps_its_type_where_the_profile_is_read_and_is_a_float_in_a_script():
    """The rule params (plain settings) hold a profile's numbers as written, as Snakemake records them; a
    script reading its params back (zerogate.contracts.base.typed) gets floats."""
    from zerogate.config.judging import GateSettings
    from zerogate.contracts.base import plain, typed

    settings = profile_settings(_tiny())
    memory = next(g for g in settings.gates if g.name == "peak_memory_per_rank")  # threshold: 24
    assert repr(memory.threshold) == "24" and plain(memory)["threshold"] == 24
    assert repr(typed(GateSettings, plain(memory)).threshold) == "24.0"
    assert repr(GateSettings(**{**plain(memory), "threshold": 24}).threshold) == "24.0"


def test_the_run_config_is_typed_with_its_defaults_and_errors_name_where_the_key_was_given():
    config = {"profile": "smoke", "machine": "auto"}
    validate(config, str(schemas.SCHEMA_DIR / "config.schema.json"))
    typed = run_config(config, lambda key: "config/config.yaml")
    # Every default the schema filled is the model's.
    assert typed.model_dump(exclude_none=True) == {k: v for k, v in config.items() if v is not None}
    assert typed.bench_repeats == 2 and typed.log is None and typed.compare == []
    with pytest.raises(InputError) as error:
        run_config({**config, "bench_repeats": 0}, lambda key: "--config")
    assert str(error.value) == "--config: bench_repeats: 0 is less than the minimum of 1"
    with pytest.raises(InputError, match="^config/config.yaml: profiel: unknown key"):
        run_config({**config, "profiel": "x"}, lambda key: "config/config.yaml")


def test_the_claims_file_has_one_typed_entry_per_kind_and_errors_name_the_entry_and_key():
    data = yaml.safe_load((REPO / "config/claims/seed.yaml").read_text())
    claims = claims_file(data)
    kinds = {claim.kind: type(claim).__name__ for claim in claims.claims}
    assert kinds["arithmetic"] == "ArithmeticClaim" and kinds["not_tested"] == "NotTestedClaim"
    assert claims.claimed_box.profile == "claim-14b"
    arithmetic = next(claim for claim in claims.claims if claim.kind == "arithmetic")
    assert repr(arithmetic.stated["total"]) == "224"  # a stated figure is quoted as the claim writes it
    broken = copy.deepcopy(data)
    del broken["claims"][0]["phi"]
    with pytest.raises(InputError) as error:
        claims_file(broken)
    assert str(error.value).startswith("config/claims/seed.yaml: claims.0.phi: required")
    with pytest.raises(jsonschema.ValidationError, match="'phi' is a required property"):
        jsonschema.validate(broken, schemas.json_schema(ClaimsFile))
    broken = copy.deepcopy(data)
    broken["claims"][0]["kind"] = "folklore"
    with pytest.raises(InputError, match="^config/claims/seed.yaml: claims.0.kind: "):
        claims_file(broken)
