"""A claim written from docs/claims.md alone is loaded and judged on paper, and a claim file's errors are one
line naming the file and the key (zerogate.config.claims.load_claim), whatever the claim.

The example is the doc's own block (after its ``<!-- claim-example -->`` marker), written to a file as a user
would copy it; its claimed box is the seed's, so its plan is the one tests/unit/test_claims.py plans (the
claimed profile rendered for the described box, then planned by plan_for_run)."""

import copy
import re
from pathlib import Path

import pytest
import yaml

from tests.unit.test_claims import CLAIMED_MACHINE, claimed_plan
from zerogate.analysis.claims import judge_on_paper, on_paper_text
from zerogate.config.claims import claim_file, claim_name, load_claim
from zerogate.contracts.verdicts import CANNOT_JUDGE, DOES_NOT_HOLD, HOLDS
from zerogate.errors import InputError

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "claims.md"


def doc_example() -> str:
    """The YAML block after the doc's claim-example marker."""
    found = re.search(r"<!-- claim-example -->\n```yaml\n(.*?)```", DOC.read_text(), re.S)
    assert found, "docs/claims.md lost its claim example"
    return found.group(1)


def test_a_claim_written_from_the_docs_alone_is_loaded_and_judged_on_paper(tmp_path):
    path = tmp_path / "my-claim.yaml"
    path.write_text(doc_example())
    claims = load_claim(REPO, str(path), "--config")
    assert claims is not None and claim_name(str(path)) == "my-claim"
    judged = dict(judge_on_paper(claims, claimed_plan(), CLAIMED_MACHINE))
    # What the doc says it reads: the host RAM holds neither run; the small card's 12 GB lies inside the
    # predicted need's interval.
    words = {claim_id: verdict.verdict for claim_id, verdict in judged.items()}
    assert words == {
        "fits_the_box": DOES_NOT_HOLD,
        "small_card_under_12gb": CANNOT_JUDGE,
        "the_cards": HOLDS,
        "weights_in_fp16": HOLDS,
        "one_second_a_step": DOES_NOT_HOLD,
    }, words
    assert "host RAM" in judged["fits_the_box"].evidence
    assert "largest micro-batch per rank that fits: " in judged["fits_the_box"].evidence
    text = on_paper_text("my-claim", claims, claimed_plan(), CLAIMED_MACHINE)
    assert text.startswith("claim my-claim (https://example.org/a-vendor-note")
    assert (
        "\n  small_card_under_12gb: cannot be judged here (the claim lies inside the predicted interval)"
        in text
    )


def test_every_shipped_claim_loads_with_its_claimed_box():
    shipped = sorted(p.stem for p in (REPO / "config" / "claims").glob("*.yaml"))
    assert {"seed", "zero-offload-v100"} <= set(shipped)
    for name in shipped:
        claims = load_claim(REPO, name, "config/config.yaml")
        assert claims.source and claims.claims, name
    assert claim_file("none") is None and load_claim(REPO, "none", "--config") is None
    assert claim_file("seed") == "config/claims/seed.yaml" and claim_file("a/b.yaml") == "a/b.yaml"


SEED = yaml.safe_load((REPO / "config" / "claims" / "seed.yaml").read_text())


def broken(tmp_path, change) -> str:
    """The seed's claim file with one change, written beside the test: the error is one line naming it."""
    data = copy.deepcopy(SEED)
    change(data)
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError) as error:
        load_claim(REPO, str(path), "--config")
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    return message[len(f"{path}: ") :]


def test_a_malformed_claim_file_is_one_line_naming_the_file_and_the_key(tmp_path):
    def misspelt(data):
        data["claims"][1]["stated"]["rank"] = data["claims"][1]["stated"].pop("ranks")

    def wrong_type(data):
        data["claims"][0]["phi"] = "14B"

    def no_box(data):
        data["claimed_box"]["machine"] = "config/machines/nope.yaml"

    def no_profile(data):
        data["claimed_box"]["profile"] = "nope"

    def no_source(data):
        del data["source"]

    assert broken(tmp_path, misspelt) == "claims.1.stated.rank: unknown key (not in the schema; misspelt?)"
    assert broken(tmp_path, wrong_type) == "claims.0.phi: '14B' is not float"
    assert broken(tmp_path, no_box) == "claimed_box.machine: no such file: config/machines/nope.yaml"
    assert broken(tmp_path, no_profile) == "claimed_box.profile: no such profile: nope"
    assert broken(tmp_path, no_source).startswith("source: required (where the claim was published")


def test_a_claim_that_is_not_there_names_where_it_was_asked_for():
    with pytest.raises(InputError) as error:
        load_claim(REPO, "nope", "--config")
    expected = "--config: claim: no such claim file: config/claims/nope.yaml (shipped: "
    assert str(error.value).startswith(expected)


def test_dry_runs_plan_no_claimed_box_without_a_claim_and_refuse_a_malformed_claim_in_one_line(tmp_path):
    """`claim=none`: the plan target's DAG holds no claimed box's plan and no claim's judge; another claim's
    results sit under its own name; a malformed claim file stops the dry run itself with one line naming the
    file and the key (the dry runs side by side)."""
    import os
    import subprocess
    import sys

    data = copy.deepcopy(SEED)
    data["claims"][0]["phi"] = "14B"
    claim = tmp_path / "mine.yaml"
    claim.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    described = "machine_description=config/machines/claim-rtx5070-rtx4090.yaml"
    runs = {
        name: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "snakemake",
                "-n",
                "--nolock",
                "--cores",
                "1",
                "plan",
                "--config",
                value,
                described,
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, value in (
            ("none", "claim=none"),
            ("broken", f"claim={claim}"),
            ("another", "claim=zero-offload-v100"),
        )
    }
    done = {name: run.communicate(timeout=300) + (run.returncode,) for name, run in runs.items()}
    out, err, code = done["none"]
    assert code == 0, err[-3000:]
    table = out.split("Job stats:")[1].split("total")[0]
    jobs = set(re.findall(r"^(\w+)\s+\d+$", table, re.MULTILINE))
    assert jobs == {"render_deepspeed_config", "plan_run", "judge_plan_claims", "plan"}, jobs
    assert "claimed_box_plan" not in out and "on_paper.txt" not in out
    # Another claim's results go under its own name, beside the seed's: neither overwrites the other.
    out, err, code = done["another"]
    assert code == 0, err[-3000:]
    here = "results/cpu-tiny/claim-rtx5070-rtx4090/claims/"
    assert f"{here}zero-offload-v100/claimed_box_plan.json" in out and f"{here}seed/" not in out
    out, err, code = done["broken"]
    errors = [line for line in (out + err).splitlines() if line.startswith("zerogate: error:")]
    assert code != 0 and errors == [f"zerogate: error: {claim}: claims.0.phi: '14B' is not float"], out + err
