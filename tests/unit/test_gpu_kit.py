"""The GPU kit's check (tests/gpu/kit.py) on hand-made wheels and a fake index: what resolves against the
image's packages, what does not, and what is fetched. `make gpu-kit` itself downloads, so it never runs
here."""

from __future__ import annotations

import zipfile
from pathlib import Path

from packaging.utils import canonicalize_name

from tests.gpu import kit

IMAGE = {"numpy": "2.5.2", "packaging": None, "huggingface-hub": "1.33.0", "torch": "2.11.0"}
TAG = "py3-none-any"


def make_wheel(folder: Path, name: str, version: str, requires=(), tag: str = TAG) -> Path:
    """A wheel holding only its METADATA, named as pip names it."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{stem}-{tag}.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {line}\n" for line in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{stem}.dist-info/METADATA", metadata)
    return path


def problems_of(folder: Path, tree_bytes: int = 1000) -> dict:
    return kit.check(folder, IMAGE, tree_bytes, {"torch": "2.13.0", "numpy": "2.5.2"})


def test_a_kit_whose_needs_the_kit_or_the_image_meet_passes(tmp_path):
    make_wheel(
        tmp_path, "alpha", "1.0", ["beta>=2", "numpy>=2.0", "packaging>=20", 'gamma; python_version < "3.10"']
    )
    make_wheel(tmp_path, "beta", "2.1", ["huggingface-hub<2"])
    make_wheel(tmp_path, "pydantic-core", "2.50.5", tag="cp312-cp312-manylinux_2_17_x86_64")
    record = problems_of(tmp_path)
    assert record["problems"] == []
    assert set(record["wheels"]) == {"alpha", "beta", "pydantic-core"}
    # packaging's version on the image was never recorded: assumed, and said so
    assert record["assumed"] == [
        "alpha 1.0 requires packaging>=20: the image's packaging, version not recorded"
    ]
    # the image's torch runs, not the pinned one: recorded; numpy agrees with its pin: not listed
    assert record["image_differs_from_pin"] == {"torch": {"image": "2.11.0", "pinned": "2.13.0"}}


def test_unmet_and_conflicting_requirements_are_problems(tmp_path):
    make_wheel(tmp_path, "alpha", "1.0", ["beta>=3", "numpy>=3", "missing-one", "huggingface-hub>=2"])
    make_wheel(tmp_path, "beta", "2.1")
    found = problems_of(tmp_path)["problems"]
    assert "alpha 1.0 requires beta>=3: the kit carries beta 2.1" in found
    assert "alpha 1.0 requires numpy>=3: the image holds numpy 2.5.2" in found
    assert "alpha 1.0 requires missing-one: nothing has it" in found
    assert "alpha 1.0 requires huggingface-hub>=2: the image holds huggingface-hub 1.33.0" in found
    assert len(found) == 4


def test_an_extra_asked_for_brings_its_requirements(tmp_path):
    make_wheel(tmp_path, "alpha", "1.0", ["beta[fast]"])
    make_wheel(tmp_path, "beta", "1.0", ['speedup>=1; extra == "fast"', 'slowdown; extra == "slow"'])
    assert problems_of(tmp_path)["problems"] == [
        'beta 1.0 requires speedup>=1; extra == "fast": nothing has it'
    ]


def test_two_versions_a_foreign_platform_and_the_size_limit_are_problems(tmp_path):
    make_wheel(tmp_path, "alpha", "1.0")
    make_wheel(tmp_path, "alpha", "1.1")
    make_wheel(tmp_path, "native", "1.0", tag="cp311-cp311-manylinux_2_17_x86_64")
    make_wheel(tmp_path, "arm", "1.0", tag="cp312-cp312-manylinux_2_17_aarch64")
    found = problems_of(tmp_path, tree_bytes=kit.CARRY_LIMIT_BYTES)["problems"]
    assert "alpha: two versions, 1.0 and 1.1" in found
    assert any(p.startswith("native-1.0-cp311") and "not installable" in p for p in found)
    assert any(p.startswith("arm-1.0-cp312") and "not installable" in p for p in found)
    assert any("exceed the 64 MiB one device call carries" in p for p in found)
    assert problems_of(tmp_path / "empty")["problems"][-1].endswith("no wheels (make gpu-kit fetches them)")


def test_the_closure_fetches_pins_then_what_the_image_lacks_each_once(tmp_path):
    index = {
        "alpha==1.0": ("alpha", "1.0", ["beta>=1", "huggingface-hub>=2", "numpy", "ghost"]),
        "beta==2.0": ("beta", "2.0", ["alpha"]),
        "huggingface-hub==2.4.0": ("huggingface-hub", "2.4.0", []),
    }
    asked = []

    def fetch(specs, folder):
        asked.append(sorted(specs))
        for spec in specs:
            if spec in index:  # "ghost" is on no index: asked once, then left as a problem
                make_wheel(folder, *index[spec])

    pins = {"alpha": "1.0", "beta": "2.0", "huggingface-hub": "2.4.0", "numpy": "2.4.6"}
    kit.fetch_closure(["alpha"], tmp_path, IMAGE, pins, fetch)
    assert asked == [["alpha==1.0"], ["beta==2.0", "ghost", "huggingface-hub==2.4.0"]]
    assert problems_of(tmp_path)["problems"] == ["alpha 1.0 requires ghost: nothing has it"]


def test_a_root_left_behind_by_a_moved_pin_is_a_problem_and_fetched_again(tmp_path):
    old = make_wheel(tmp_path, "alpha", "1.0")
    record = kit.check(tmp_path, IMAGE, 1000, {"alpha": "1.1"}, ["alpha"])
    assert record["problems"] == [
        "alpha: the kit carries 1.0, the project pins 1.1 (make gpu-kit fetches it)"
    ]
    kit.fetch_closure(
        ["alpha"], tmp_path, IMAGE, {"alpha": "1.1"}, lambda specs, folder: make_wheel(folder, "alpha", "1.1")
    )
    assert not old.exists()
    assert kit.check(tmp_path, IMAGE, 1000, {"alpha": "1.1"}, ["alpha"])["problems"] == []


def test_a_pin_that_does_not_meet_the_requirement_gives_way_to_the_requirement():
    requirement = kit.Requirement("huggingface-hub>=3")
    assert kit.requirement_to_fetch("huggingface-hub", requirement, {"huggingface-hub": "2.4.0"}) == (
        "huggingface-hub>=3"
    )
    assert kit.requirement_to_fetch("beta", None, {"beta": "2.0"}) == "beta==2.0"


def test_the_kits_lists_name_pinned_packages_and_the_image_as_the_device_notes_give_it():
    image = kit.read_listing(kit.IMAGE_FILE)
    assert image["python"] == "3.12.3"
    assert image["torch"] == "2.11.0" and image["transformers"] == "5.17.0"
    assert "deepspeed" not in image and "pydantic" not in image and "snakemake" not in image
    pins = kit.project_pins()
    roots = kit.read_listing(kit.ROOTS_FILE)
    assert {"deepspeed", "snakemake", "datasets", "pydantic"} <= set(roots)
    assert all(canonicalize_name(name) in pins for name in roots), "every root is pinned in envs/"
    assert "torch" not in roots
