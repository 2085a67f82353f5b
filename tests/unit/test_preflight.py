"""The pre-flight check refuses a profile the machine cannot run, and says why."""

from tests.conftest import REPO, gpu_fingerprint
from zerogate.config.profile import load_profile_chain, resolve_profile
from zerogate.contracts.machine import Preflight, Ram
from zerogate.predict.preflight import preflight_refusal, verdict


def profile(name):
    return resolve_profile(
        load_profile_chain(REPO / "config/profiles", name, "config/config.yaml", "profile")
    )


def with_ram(fingerprint, gib):
    """The machine with ``gib`` GiB of host memory."""
    return fingerprint.model_copy(update={"ram": Ram(total_bytes=int(gib * 1024**3))})


def test_claim_profile_is_refused_on_a_cpu_machine(cpu_fingerprint):
    result = verdict(profile("claim-14b")["preflight"], cpu_fingerprint)
    assert not result.ok
    assert any("2 CUDA device(s), found 0" in s for s in result.shortfalls)
    assert any("host memory" in s for s in result.shortfalls)
    assert Preflight.parse(result.as_json(), "preflight.json") == result  # the file reads back as written


def test_claim_profile_passes_on_the_claims_hardware():
    machine = with_ram(gpu_fingerprint(("RTX 5070 Laptop", 8.0), ("RTX 4090", 24.0)), 256)
    assert verdict(profile("claim-14b")["preflight"], machine) == Preflight(
        ok=True, needs=profile("claim-14b")["preflight"], shortfalls=[]
    )


def test_small_card_and_short_ram_are_each_named():
    machine = with_ram(gpu_fingerprint(("small", 6.0), ("big", 24.0)), 64)
    shortfalls = verdict(profile("claim-14b")["preflight"], machine).shortfalls
    assert len(shortfalls) == 2
    assert "smallest has 6.0 GiB" in shortfalls[0] and "has 64.0 GiB" in shortfalls[1]


def test_profiles_without_needs_pass(cpu_fingerprint):
    assert verdict(None, cpu_fingerprint).ok
    assert verdict(profile("cpu-smollm2")["preflight"], cpu_fingerprint).ok


def test_refusal_message_names_the_profile_each_shortfall_and_the_basis(cpu_fingerprint):
    needs = profile("claim-14b")["preflight"]
    message = preflight_refusal(verdict(needs, cpu_fingerprint), "claim-14b")
    assert message.startswith("profile claim-14b refused by the pre-flight check: needs cuda devices")
    assert needs["basis"] in message
