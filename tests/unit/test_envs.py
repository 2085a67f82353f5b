"""The conda environment files (for --sdm conda) pin the same versions as envs/requirements.txt."""

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def pins(lines):
    result = {}
    for line in lines:
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            result[name.lower()] = version
    return result


def test_conda_envs_match_the_pinned_requirements():
    required = pins((REPO / "envs/requirements.txt").read_text().splitlines())
    for env_file in ("train.yaml", "analysis.yaml"):
        env = yaml.safe_load((REPO / "envs" / env_file).read_text())
        pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
        env_pins = pins(pip_section)
        assert env_pins, env_file
        for name, version in env_pins.items():
            assert required.get(name) == version, (
                f"envs/{env_file}: {name}=={version} vs requirements {required.get(name)}"
            )


def test_every_rule_names_a_conda_env_that_exists():
    for rule_file in (REPO / "workflow/rules").glob("*.smk"):
        for line in rule_file.read_text().splitlines():
            if line.strip().startswith('"../../envs/'):
                assert (REPO / "workflow/rules" / line.strip().strip('"')).resolve().is_file(), line


def test_requirements_pin_the_briefs_versions():
    required = pins((REPO / "envs/requirements.txt").read_text().splitlines())
    assert required["torch"] == "2.13.0" and required["deepspeed"] == "0.19.8"
    assert required["snakemake"].startswith("9.27.") and required["transformers"].startswith("5.23.")
    assert required["datasets"].startswith("5.2.")
