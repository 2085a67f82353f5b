"""A launcher log judged on its own: the input checks and names (analysis.log_input), the counts
(analysis.log_summary), the gates a log supports (analysis.log_gates), the contract (contracts.log_summary),
the page (report.log_page), and the judge_log rule end to end in a copy of the workflow."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.unit.helpers import clean_checkout, run_snakemake, settings
from zerogate.analysis.failure_attribution import Attribution, attribute_events
from zerogate.analysis.log_gates import judge_log_file, judge_log_gates, step_times
from zerogate.analysis.log_input import check_log_file, given_logs, read_log_text, result_names, rule_inputs
from zerogate.analysis.log_summary import last_loss_scale, log_counts, precision
from zerogate.analysis.parse import parse_launcher_log
from zerogate.contracts.base import ContractError
from zerogate.contracts.log_summary import LogSummary
from zerogate.contracts.verdicts import FAIL, NOT_MEASURED, PASS
from zerogate.errors import InputError
from zerogate.report.log_page import render_log_page

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
CORPUS = DATA / "logs"


def corpus(name: str) -> Path:
    return CORPUS / f"{name}.log"


def judged(tiny_profile, path: Path, warmup: int = 0) -> dict[str, object]:
    """gate name -> LogGate, judged against the default profile's gates."""
    summary = judge_log_file(path, path.stem, settings(tiny_profile).gates, warmup)
    return {gate.name: gate for gate in summary.gates}


# ---- the logs given -------------------------------------------------------------------------------------


def test_a_file_that_is_not_a_text_log_is_refused_naming_it(tmp_path):
    cases = {
        "empty.log": b"",
        "blank.log": b" \n\t\n",
        "binary.log": b"PK\x03\x04\x00\x00",
        "latin.log": b"\xff\xfe" * 50,
    }
    problems = {}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(InputError) as error:
            check_log_file(tmp_path / name)
        assert str(error.value).startswith(f"{tmp_path / name}: ")
        problems[name] = error.value.problem
    assert problems == {
        "empty.log": "empty: no log lines to judge",
        "blank.log": "empty: no log lines to judge",
        "binary.log": "binary (NUL bytes), not a text log",
        "latin.log": "not UTF-8 text (mostly undecodable bytes), not a text log",
    }
    with pytest.raises(InputError, match="no such file"):
        check_log_file(tmp_path / "absent.log")
    with pytest.raises(InputError, match="not a file"):
        check_log_file(tmp_path)


def test_a_stray_undecodable_byte_does_not_refuse_a_log(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes(b"[Rank 0] step=1, skipped=0\n" * 30 + b"caf\xe9\n")
    check_log_file(log)
    assert read_log_text(log).endswith("caf\ufffd\n")


def test_results_are_named_after_the_stem_and_duplicates_by_path_not_order(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = str(tmp_path / "a" / "train.log"), str(tmp_path / "b" / "train.log")
    names = result_names([first, second, str(tmp_path / "odd name!.txt")])
    assert list(names.values()) == [first, second, str(tmp_path / "odd name!.txt")]
    assert [n[:6] for n in names][:2] == ["train-", "train-"] and len({*names}) == 3 and "odd_name_" in names
    assert result_names([second, first]) == {k: names[k] for k in reversed(list(names)[:2])}
    assert result_names([first, str(tmp_path / "a" / ".." / "a" / "train.log")]) == {"train": first}
    assert (
        given_logs(None) == [] and given_logs("x.log") == ["x.log"] and given_logs(["a", "b"]) == ["a", "b"]
    )


def test_the_rules_inputs_stop_at_the_first_bad_log_or_at_none():
    stops: list[str] = []

    def stop(error):
        stops.append(str(error))
        raise SystemExit(1)

    good = str(DATA / "deepspeed_fp16_overflow.log")
    assert rule_inputs({"a": good}, "--config", stop) == {"logs": [good]}
    for logs in ({}, {"a": good, "b": str(DATA / "absent.log")}):
        with pytest.raises(SystemExit):
            rule_inputs(logs, "--config", stop)
    assert stops == [
        "--config: log: judge_log needs a log: --config log=PATH (or log=[A,B])",
        f"{DATA / 'absent.log'}: no such file",
    ]


# ---- the counts -----------------------------------------------------------------------------------------


def test_counts_of_a_captured_zerogate_fp16_log():
    counts = log_counts(parse_launcher_log((DATA / "deepspeed_fp16_overflow.log").read_text()))
    assert counts == {
        "deepspeed_version": None,
        "precision": "fp16",
        "skipped_steps": 3,
        "hysteresis_skips": 1,
        "last_loss_scale": 4096.0,
        "optimizer_steps": 20,
        "progress_skipped": 4,
        "progress_lines": 2,
        "wall_clock_lines": 0,
        "throughput_lines": 0,
        "memory_lines": 0,
        "tracebacks": 1,
        "fatal_loss_scale": 1,
        "nccl_timeouts": 0,
        "failed_ranks": [0],
        "exit_errors": [{"rank": 0, "code": 1}],
        "world_size": None,
        "ambiguities": [],
    }


def test_precision_as_the_log_states_it():
    def of(text):
        return precision(parse_launcher_log(text))

    print_line = "[config.py:957:print]   {} ................. {}\n"
    assert (
        of(print_line.format("fp16_enabled", "False") + print_line.format("bfloat16_enabled", "False"))
        == "fp32"
    )
    assert of(print_line.format("bf16_enabled", "True")) == "bf16"
    assert of(print_line.format("fp16_enabled", "True")) == "fp16"
    assert of("Creating torch.float16 ZeRO stage 3 optimizer\n") == "fp16"
    assert (
        of(print_line.format("fp16_enabled", "False")) is None
    )  # bf16 not printed: cannot tell fp32 from bf16
    assert of("[deepspeed] OVERFLOW! Rank 0 Skipping step.\n") is None  # a skip without a scale: bf16's check
    assert of("Reducing dynamic loss scale from 4 to 2\n") == "fp16"


def test_last_loss_scale_follows_skips_and_increases_in_line_order():
    text = (
        "Reducing dynamic loss scale from 8.0 to 4.0\nIncreasing dynamic loss scale from 4.0 to 8.0\n"
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 8, but hysteresis is 2. Reducing "
        "hysteresis to 1\n"
    )
    assert last_loss_scale(parse_launcher_log(text)) == 8.0
    assert last_loss_scale(parse_launcher_log(text.split("\n[deepspeed]")[0])) == 8.0
    assert last_loss_scale(parse_launcher_log("Reducing dynamic loss scale from 8.0 to 4.0\n")) == 4.0
    assert last_loss_scale(parse_launcher_log("[deepspeed] OVERFLOW! Rank 0 Skipping step.\n")) is None


def test_ambiguities_are_listed_once_with_their_kind():
    counts = log_counts(parse_launcher_log(corpus("ds1825-throughput-before-0.7").read_text()))
    assert len(counts["ambiguities"]) == 1 and counts["ambiguities"][0].startswith(
        "throughput: DeepSpeed before 0.8"
    )


# ---- the gates a log supports ---------------------------------------------------------------------------


def test_overflow_fraction_is_measured_only_under_an_fp16_loss_scaler(tiny_profile):
    fp16 = judged(tiny_profile, DATA / "deepspeed_fp16_overflow.log")["overflow_skip_fraction"]
    assert (fp16.verdict, fp16.measured) == (
        FAIL,
        3 / 20,
    ) and fp16.reason == "measured 0.15 ratio is not <= 0.05"
    assert fp16.evidence == {
        "skipped_steps(steps)": 3,
        "hysteresis_skips(steps)": 1,
        "optimizer_steps(steps)": 20,
        "deepspeed_progress_skipped(steps)": 4,
    }
    assert fp16.threshold == 0.05 and fp16.comparison == "<=" and "overflow lines" in fp16.definition
    reasons = {
        name: judged(tiny_profile, corpus(name))["overflow_skip_fraction"]
        for name in (
            "openrlhf841-0.16.3-bf16-zero2-init",
            "ds1825-throughput-before-0.7",
            "ds931-zero-loss-scaler-hysteresis",
        )
    }
    assert {n: (g.verdict, g.reason) for n, g in reasons.items()} == {
        "openrlhf841-0.16.3-bf16-zero2-init": (
            NOT_MEASURED,
            "the log shows bf16 training: no fp16 loss scaler to skip steps",
        ),
        "ds1825-throughput-before-0.7": (
            NOT_MEASURED,
            "the log does not say whether fp16 loss scaling was on (no "
            "overflow line, no DeepSpeed config print of fp16_enabled)",
        ),
        "ds931-zero-loss-scaler-hysteresis": (
            NOT_MEASURED,
            "no progress or throughput line names an optimizer step: nothing to divide by",
        ),
    }


def test_a_clean_fp16_log_passes_the_overflow_gate(tiny_profile, tmp_path):
    log = tmp_path / "clean.log"
    log.write_text(
        "[config.py:957:print]   fp16_enabled ................. True\n"
        "[Rank 0] step=100, skipped=0, lr=[1e-05]\n"
    )
    gate = judged(tiny_profile, log)["overflow_skip_fraction"]
    assert (gate.verdict, gate.measured, gate.reason) == (PASS, 0.0, "")


def test_the_log_judges_fatal_aborts_and_leaves_the_rest_of_the_nonfinite_gate_not_measured(tiny_profile):
    fatal = judged(tiny_profile, corpus("tencentpretrain57-two-ranks-fatal-abort-on-one-line"))
    assert (
        fatal["zero_nonfinite_fatal_loss_scale_aborts"].verdict,
        fatal["zero_nonfinite_fatal_loss_scale_aborts"].measured,
    ) == (FAIL, 2.0)
    rest = fatal["zero_nonfinite"]
    assert rest.verdict == NOT_MEASURED and "zero_nonfinite_fatal_loss_scale_aborts" in rest.reason
    clean = judged(tiny_profile, DATA / "deepspeed_0.19.8_cpu_fp32_zero3.log")
    assert clean["zero_nonfinite_fatal_loss_scale_aborts"].verdict == PASS


def test_failed_ranks_from_the_log(tiny_profile):
    crashed = judged(tiny_profile, corpus("llamafactory2206-childfailederror-several-ranks-and-srun"))[
        "ranks_completed"
    ]
    assert (crashed.verdict, crashed.measured) == (FAIL, 3.0)
    assert (
        crashed.evidence["failed_ranks(rank)"] == [0, 6, 7]
        and crashed.evidence["failures_naming_no_rank(count)"] == 1
    )
    unnamed = judged(tiny_profile, corpus("diffusers9204-accelerate-calledprocesserror-no-local-rank"))[
        "ranks_completed"
    ]
    assert (unnamed.verdict, unnamed.measured) == (FAIL, 1.0)
    clean = judged(tiny_profile, DATA / "deepspeed_0.19.8_cpu_fp32_zero3.log")["ranks_completed"]
    assert (clean.verdict, clean.measured, clean.evidence["successful_exits(count)"]) == (PASS, 0.0, 2)
    silent = judged(tiny_profile, corpus("ds522-see-memory-usage-zero2"))["ranks_completed"]
    assert silent.verdict == NOT_MEASURED and "does not show how the ranks ended" in silent.reason


def attributed(text: str) -> Attribution:
    return attribute_events(parse_launcher_log(text))


TRACEBACK = 'Traceback (most recent call last):\n  File "a.py", line 1\nRuntimeError: boom'


def test_an_unprefixed_traceback_is_rank_zeros_only_in_a_log_of_one_process():
    one_process = attributed(f"[launch.py:100:main] dist_world_size=1\n{TRACEBACK}")
    assert one_process.ranks == [0] and one_process.failed[0].causes == ["traceback"]
    partitions = attributed(f"Rank: 0 partition count [1] and sizes[(2601517056, False)]\n{TRACEBACK}")
    assert partitions.ranks == [0]
    for several in (
        "dist_world_size=2",
        "[Rank 1] step=1, skipped=0",
        "Killing subprocess 1\nKilling subprocess 2",
    ):
        found = attributed(f"dist_world_size=1\n{several}\n{TRACEBACK}")
        assert found.ranks == [] and found.rank_count == 1, several
    assert attributed(TRACEBACK).ranks == []  # nothing says how many processes there were


def test_a_kill_or_an_exit_by_signal_of_the_only_process_is_rank_zeros():
    killed = attributed(
        "Rank: 0 partition count [1] and sizes[(6049711186, False)]\n"
        "[launch.py:318:sigkill_handler] Killing subprocess 80"
    )
    assert killed.ranks == [0] and killed.failed[0].causes == ["kill"]
    exit_only = attributed(
        "[launch.py:325:sigkill_handler] ['python', '--local_rank=0'] exits with return code = -9"
    )
    assert exit_only.ranks == [0] and exit_only.exits == ((0, -9),)


def test_an_exit_by_signal_is_the_one_started_process_without_a_traceback_of_its_own():
    kills = "Killing subprocess 10\nKilling subprocess 11\n"
    exit_line = "['python', '--local_rank=1'] exits with return code = {code}"
    traced = "[rank0]: Traceback (most recent call last):\n[rank0]: RuntimeError: gloo\n"
    assert attributed(traced + kills + exit_line.format(code=-9)).exits == ((1, -9),)
    # An exit with 1 may be rank 0's own; a signal with no traceback to rule out names no rank.
    assert attributed(traced + kills + exit_line.format(code=1)).exits == ((None, 1),)
    untraced = attributed(kills + exit_line.format(code=-9))
    assert untraced.ranks == [] and untraced.exits == ((None, -9),) and untraced.rank_count == 1


def test_a_launchers_traceback_is_no_failure_of_its_own():
    agent = (
        "failed (exitcode: 1) local_rank: 1 (pid: 355716) of binary: python\n"
        'Traceback (most recent call last):\n  File "/x/torch/distributed/run.py", line 910, in run\n'
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "
    )
    found = attributed(agent)
    assert (
        found.ranks == [1]
        and found.unnamed is None
        and [f.kind for f in found.lines()] == ["rank_exit_error"]
    )
    alone = attributed(agent.split("\n", 1)[1])
    assert alone.ranks == [] and [f.kind for f in alone.unnamed.lines] == ["traceback"]


def test_the_summary_lists_each_failed_rank_with_its_lines():
    summary = judge_log_file(
        corpus("msswift6301-watchdog-timeout-failure-and-dump-signal-three-ranks"), "m", [], 0
    )
    assert [(f.rank, f.causes, [line.line for line in f.lines]) for f in summary.failures] == [
        (2, ["watchdog"], [1, 2]),
        (4, ["watchdog"], [6]),
        (5, ["watchdog"], [3, 4, 5]),
    ]
    data = json.loads(summary.model_dump_json(by_alias=True))
    assert list(data)[-1] == "failures" and data["failures"][1]["lines"][0]["kind"] == "nccl_timeout"


def test_step_time_from_the_pipeline_engine_after_the_warmup(tiny_profile):
    gates = judged(tiny_profile, corpus("diffusionpipe410-pipeline-engine-steps"), warmup=1)
    median, p90 = gates["optimizer_step_time"], gates["optimizer_step_time_p90"]
    assert median.measured == 533.063 and median.verdict == FAIL
    assert median.evidence == {
        "values(s)": [532.811, 533.063, 533.263],
        "lines(count)": 3,
        "source": "the pipeline engine's iter time",
        "warmup_steps_excluded(steps)": 1,
    }
    assert p90.measured == pytest.approx(533.223)
    assert (
        gates["micro_step_time"].verdict == NOT_MEASURED
        and "gradient_accumulation_steps" in gates["micro_step_time"].reason
    )


def test_step_time_from_current_samples_per_second_needs_the_batch_size(tiny_profile, tmp_path):
    line = (
        "epoch=0/micro_step={0}/global_step={0}, RunningAvgSamplesPerSec=7.8, CurrSamplesPerSec={1}, "
        "MemAllocated=59.65GB, MaxMemAllocated=63.31GB\n"
    )
    config = "[config.py:957:print]   {} ............. {}\n"
    log = tmp_path / "tput.log"
    log.write_text(line.format(1, 1.0) + line.format(2, 8.0) + line.format(3, 16.0))
    assert judged(tiny_profile, log)["optimizer_step_time"].reason == (
        "the throughput lines give samples/s, and the log does not state train_batch_size (DeepSpeed's "
        "config print) "
        "to turn them into a step time"
    )
    log.write_text(
        config.format("train_batch_size", 16)
        + config.format("gradient_accumulation_steps", 4)
        + log.read_text()
    )
    gates = judged(tiny_profile, log, warmup=1)
    assert gates["optimizer_step_time"].measured == 1.5 and gates["optimizer_step_time"].verdict == PASS
    assert gates["micro_step_time"].measured == 0.375
    assert gates["optimizer_step_time"].evidence["source"] == "train_batch_size / CurrSamplesPerSec"


def test_step_time_is_not_measured_from_running_averages_or_without_throughput_lines(tiny_profile):
    events = parse_launcher_log(
        "[config.py:957:print]   train_batch_size ............. 8\n"
        "[timer.py:166:stop] 0/320, SamplesPerSec=28.75\n"
    )
    with pytest.raises(Exception, match="before 0.8 prints a running average, or a current rate"):
        step_times(events, 0)
    assert (
        judged(tiny_profile, corpus("ds522-see-memory-usage-zero2"))["optimizer_step_time"].reason
        == "no DeepSpeed throughput line in the log"
    )


def test_gates_a_log_cannot_support_are_not_measured_with_their_reason(tiny_profile):
    gates = judged(tiny_profile, corpus("ds522-see-memory-usage-zero2"))
    for name, why in {
        "peak_memory_smallest_device": "DeepSpeed's memory lines",
        "peak_memory_per_rank": "rank 0",
        "loss_convergence": "no per-step loss",
        "step_time_over_physical_floor": "physical floor",
    }.items():
        assert gates[name].verdict == NOT_MEASURED and why in gates[name].reason, name
    assert {g.verdict for g in gates.values()} <= {PASS, FAIL, NOT_MEASURED}
    odd = (
        settings(tiny_profile)
        .gates[0]
        .model_copy(update={"name": "x", "statistic": "mean", "metric": "loss"})
    )
    (gate,) = judge_log_gates([odd], log_counts(parse_launcher_log("")), parse_launcher_log(""), 0)
    assert gate.reason == "zerogate cannot read statistic 'mean' of 'loss' from a launcher log"


# ---- the contract and the page --------------------------------------------------------------------------


def test_the_summary_file_round_trips_through_its_contract(tiny_profile, tmp_path):
    summary = judge_log_file(
        DATA / "deepspeed_fp16_overflow.log", "overflow", settings(tiny_profile).gates, 1
    )
    path = summary.write(tmp_path / "log_summary.json")
    data = json.loads(path.read_text())
    assert data["contract"] == "log_summary/1" and data["exit_errors"] == [{"rank": 0, "code": 1}]
    assert LogSummary.read(path) == summary and summary.lines == 11 and summary.name == "overflow"
    data["skipped_stepz"] = 1
    path.write_text(json.dumps(data))
    with pytest.raises(ContractError, match="skipped_stepz"):
        LogSummary.read(path)


def test_the_page_shows_the_verdicts_counts_exits_and_ambiguities(tiny_profile, tmp_path):
    summary = judge_log_file(
        corpus("llamafactory2206-childfailederror-several-ranks-and-srun"),
        "lf",
        settings(tiny_profile).gates,
        0,
    )
    page = render_log_page(summary, "cpu-tiny")
    assert page.startswith("<!DOCTYPE html>") and "body{font-family" in page  # the main report's style sheet
    assert "<table id='verdicts'>" in page and "<td class='FAIL'>FAIL</td>" in page and "NOT MEASURED" in page
    assert "<table id='exit-errors'" in page and "<td>—</td><td>1</td>" in page
    assert "profile <code>cpu-tiny</code>" in page and "ranks that failed" in page
    assert (
        "rank 0: exit (line 22); rank 6: exit (line 6); rank 7: exit (line 13); no rank named: exit (line 26)"
        in page
    )
    ambiguous = judge_log_file(corpus("neox1306-two-unprefixed-tracebacks-interleaved"), "n", [], 0)
    assert "<ul id='ambiguities'><li>traceback: interleaved" in render_log_page(ambiguous, "cpu-tiny")
    assert "id='ambiguities'" not in page
    assert "&lt;b&gt;" in render_log_page(summary, "<b>")


def test_judge_log_refuses_a_non_log_naming_it(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"\0\1")
    with pytest.raises(InputError, match=r"x.bin: binary"):
        judge_log_file(tmp_path / "x.bin", "x", [], 0)


# ---- the rule -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workflow_copy(tmp_path_factory) -> Path:
    """The workflow alone (no results, no .snakemake), as a clean checkout has it."""
    return clean_checkout(tmp_path_factory.mktemp("checkout"))


def snakemake(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    return run_snakemake(checkout, *args)


def test_judge_log_writes_a_summary_and_page_per_log_from_a_clean_checkout(workflow_copy, tmp_path):
    foreign = corpus("llamafactory7396-nccl-watchdog-numbered-lines")
    own = DATA / "deepspeed_0.19.8_cpu_fp32_rank1_killed.log"
    done = snakemake(workflow_copy, "judge_log", "--config", f"log=[{foreign},{own}]", "machine=test")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = workflow_copy / "results" / "logs"
    summary = LogSummary.read(results / foreign.stem / "log_summary.json")
    assert (summary.failed_ranks, summary.nccl_timeouts) == ([0, 3, 4], 3)
    mine = LogSummary.read(results / own.stem / "log_summary.json")
    assert mine.failed_ranks == [0, 1] and [e.as_json() for e in mine.exit_errors] == [
        {"rank": 1, "code": -9}
    ]
    assert "ranks_completed" in (results / own.stem / "log_summary.html").read_text()
    assert sorted(p.name for p in results.iterdir()) == sorted([foreign.stem, own.stem, "judge_log.log"])


def test_judge_log_refuses_a_binary_log_with_one_line_before_writing(workflow_copy, tmp_path):
    (tmp_path / "core.log").write_bytes(b"\x7fELF\0\0\0")
    done = snakemake(workflow_copy, "judge_log", "--config", f"log={tmp_path / 'core.log'}", "machine=test")
    assert done.returncode != 0
    assert f"zerogate: error: {tmp_path / 'core.log'}: binary (NUL bytes), not a text log" in done.stderr
    assert not (workflow_copy / "results" / "logs" / "core").exists()


def test_judge_log_needs_nothing_but_the_log_and_stays_out_of_the_default_dag(workflow_copy):
    alone = snakemake(
        workflow_copy,
        "-n",
        "judge_log",
        "--config",
        f"log={DATA / 'deepspeed_fp16_overflow.log'}",
        "machine=test",
    )
    assert alone.returncode == 0, alone.stderr[-2000:]
    table = alone.stdout.split("Job stats:")[1].split("total")[0]
    assert [line.split()[0] for line in table.strip().splitlines()[2:]] == ["judge_log"]
    default = snakemake(workflow_copy, "-n", "--config", "machine=test")
    assert default.returncode == 0 and "judge_log" not in default.stdout and "train " in default.stdout
