"""Each launcher-log format zerogate.analysis.launcher_log knows, one test per format or rule: the lines
are in the shapes DeepSpeed, torch, NCCL and the schedulers print (most taken from tests/data/logs/)."""

from __future__ import annotations

from zerogate.analysis import launcher_log
from zerogate.analysis.launcher_failures import (
    LAST_STARTED,
    LOCAL_RANK_ON_SEVERAL_NODES,
    NO_LOCAL_RANK,
)
from zerogate.analysis.launcher_log import (
    FRAMEWORK_TIMERS_UNMARKED,
    OLD_THROUGHPUT_COUNT,
    read_events,
    timers,
)
from zerogate.analysis.launcher_messages import PrefixStyle, messages, split_glued, wrap_width
from zerogate.analysis.launcher_skips import REPEATED_SKIP
from zerogate.analysis.launcher_tracebacks import INTERLEAVED, is_exception_line

HEADER = "[2023-04-28 06:51:29,903] [INFO] [loss_scaler.py:188:update_scale] "


def of(kind: str, text: str) -> list[dict]:
    return [e for e in read_events(text) if e["kind"] == kind]


def one(kind: str, text: str) -> dict:
    found = of(kind, text)
    assert len(found) == 1, found
    return found[0]


# ---- prefixes -------------------------------------------------------------------------------------------


def test_pdsh_host_prefix_is_a_host_when_it_repeats_or_is_an_address():
    style = PrefixStyle.of(["gpu1504: a", "gpu1504: b", "10.141.250.231: c", "worker: d", "worker: e"])
    assert style.hosts == frozenset({"gpu1504", "10.141.250.231"})  # "worker" has no digit or hyphen
    assert style.strip("gpu1504: [rank22]: File x") == ("File x", {"host": "gpu1504", "rank": 22})
    assert PrefixStyle.of(["node-1: a"]).hosts == frozenset()  # once, and not an address


def test_exception_names_and_words_before_a_colon_are_never_hosts():
    lines = [
        "RuntimeError: boom",
        "RuntimeError: bang",
        "x.ValueError: y",
        "12: a",
        "12: b",
        "loss_2: 1",
        "loss_2: 2",
        "localhost: up",
        "localhost: down",
    ]
    assert PrefixStyle.of(lines).hosts == frozenset({"localhost"})


def test_writer_prefixes_name_rank_local_rank_or_nothing():
    style = PrefixStyle.of([])
    assert style.strip("[rank6]:[E901 12:00] x") == ("[E901 12:00] x", {"rank": 6})
    assert style.strip("[default3]:Traceback") == ("Traceback", {"local_rank": 3})
    assert style.strip("[1,5]<stderr>:boom") == ("boom", {"rank": 5})
    assert style.strip("stderr: stdout: text") == ("text", {})
    assert style.strip("[E901 12:00] x") == ("[E901 12:00] x", {})


def test_slurm_task_labels_and_viewer_line_numbers_are_stripped_only_log_wide():
    style = PrefixStyle.of(["0: a", "1: b", "[7] c", "[8] d"])
    assert (style.task_labels, style.numbered) == (True, True)
    assert style.strip("12: [80746] [rank1]: x") == ("x", {"rank": 1})
    alone = PrefixStyle.of(["0: a", "[7] c"])
    assert alone.strip("0: a") == ("0: a", {}) and alone.strip("[7] c") == ("[7] c", {})


def test_messages_carry_their_writer_and_first_line():
    found = list(messages("gpu1: [rank0]: a\ngpu1: b\n\x1b[31mred\x1b[0m\r\nbar 1\rbar 2\n"))
    assert [(m.line, m.text, m.host, m.rank) for m in found] == [
        (1, "a", "gpu1", 0),
        (2, "b", "gpu1", None),
        (3, "red", None, None),
        (4, "bar 1", None, None),
        (5, "bar 2", None, None),
        (6, "", None, None),
    ]


# ---- glued and wrapped lines ----------------------------------------------------------------------------


def test_glued_messages_are_cut_where_each_starts():
    bar = "  0%|          | 95/97976 [1:28:37<1514:49:16, 55.71s/it]"
    assert split_glued(bar + "Traceback (most recent call last):") == [
        bar,
        "Traceback (most recent call last):",
    ]
    assert split_glued("train: 4/12 [00:05<00:10, 1.28s/step, loss=5.1][Rank 0] time (ms) | a: 1") == [
        "train: 4/12 [00:05<00:10, 1.28s/step, loss=5.1]",
        "[Rank 0] time (ms) | a: 1",
    ]
    assert split_glued("fdsui[2023-07-10 04:26:05,876] [INFO] x") == [
        "fdsui",
        "[2023-07-10 04:26:05,876] [INFO] x",
    ]
    assert split_glued("Map:  96%|████WARNING:torch.distributed:x") == [
        "Map:  96%|████",
        "WARNING:torch.distributed:x",
    ]
    assert split_glued("done.E0410 08:46:30.329000 292734 torch/x] y") == [
        "done.",
        "E0410 08:46:30.329000 292734 torch/x] y",
    ]
    assert split_glued("a[rank1]: b") == ["a", "[rank1]: b"]


def test_a_logger_header_and_its_rank_stay_one_message():
    line = "[2023-07-25 21:03:21,037] [INFO] [logging.py:96:log_dist] [Rank 0] step=35, skipped=0, lr=[1e-06]"
    assert split_glued(line) == [line]
    assert split_glued("   ") == ["   "] and split_glued("ok [00:01<00:02, 1it/s] ") == [
        "ok [00:01<00:02, 1it/s] "
    ]


def test_a_glued_rank_prefix_names_the_rank_of_its_piece():
    found = list(
        messages("[rank0]: x[rank1]: Current loss scale already at minimum - cannot decrease scale anymore")
    )
    assert [(m.text, m.rank) for m in found] == [
        ("x", 0),
        ("Current loss scale already at minimum - cannot decrease scale anymore", 1),
    ]


def test_wrap_width_is_the_widest_line_when_it_repeats():
    assert wrap_width(["x" * 120, "y" * 120, "z" * 30]) == 120
    assert wrap_width(["x" * 120, "y" * 119]) is None  # the widest line alone: not a wrap
    assert wrap_width(["x" * 99, "y" * 99]) is None  # too narrow for a terminal wrap
    assert wrap_width(["x" * 100, "y" * 100]) == 100


def test_a_terminal_wrapped_line_is_joined_unless_the_next_starts_a_message():
    # A terminal 120 columns wide: the first line fills it, the others are padded to it (as tmux copies them).
    first = (
        "[Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, "
        "NumelIn={}, Timeout(ms)="
    )
    first = first.format("1" * (120 - len(first.format(""))))
    text = "\n".join(
        [
            first,
            "600000) ran for 600022 milliseconds before timing out.".ljust(120),
            "Grad overflow on iteration 3".ljust(120),
            "Grad overflow on iteration 4",
        ]
    )
    found = list(messages(text))
    assert len(first) == 120 and [m.line for m in found] == [1, 3, 4]
    assert found[0].text.startswith(first + "600000) ran for")
    timeout = one("nccl_timeout", text)
    assert timeout["detail"]["ran_for_ms"] == 600022.0 and timeout["detail"]["timeout_ms"] == 600000.0


def test_a_word_a_terminal_split_with_padding_is_joined():
    line = (
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scal"
        + " " * 33
        + "e: 8192, reducing to 4096"
    )
    assert one("overflow", line)["detail"] == {"attempted": 8192.0, "new": 4096.0}
    memory = (
        "MA 4.96 GB" + " " * 30 + "Max_MA 5.09 GB   CA 6.39 GB   Max_CA 6 GB"
    )  # before an upper-case word: kept
    assert one("memory", memory)["detail"]["max_ma_GiB"] == 5.09
    assert list(messages("a" + " " * 19 + "b"))[0].text == "a" + " " * 19 + "b"


def test_a_launcher_line_broken_by_a_paste_is_joined_until_its_end():
    text = (
        "[ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=7', "
        "'--save_total_limi\n"
        "t', '1'] exits with return code = -9\nnext"
    )
    exit_error = one("rank_exit_error", text)
    # The launcher prints the command of the last process it started: local rank 7 of 8 (which exited is
    # not in the line).
    assert (exit_error["rank"], exit_error["detail"], exit_error["line"]) == (
        None,
        {"code": -9.0, "started_local_ranks": 8, "ambiguous": LAST_STARTED.format(local_rank=7)},
        1,
    )
    assert [m.text for m in messages(text)][-1] == "next"
    called = (
        "subprocess.CalledProcessError: Command '['python', '-u', 'a.py', \n'--local_rank=2']' returned "
        "non-zero exit status 1."
    )
    assert one("rank_exit_error", called)["detail"]["started_local_ranks"] == 3


def test_a_broken_line_whose_end_never_comes_is_left_alone():
    text = "x sigkill_handler] ['python', 'a.py'\n" + "more\n" * 7 + "] exits with return code = 1"
    assert [m.line for m in messages(text)] == list(range(1, 10))
    stopped = (
        "x sigkill_handler] ['python', 'a.py'\n[2023-01-01 00:00:00,000] next\n] exits with return code = 1"
    )
    assert [m.line for m in messages(stopped)] == [1, 2, 3]


# ---- DeepSpeed's progress, throughput, memory and timers -------------------------------------------------


def test_progress_line():
    event = one("ds_progress", "[Rank 0] step=40, skipped=2, lr=[5e-05], mom=[[0.9, 0.999]]")
    assert (event["rank"], event["step"], event["detail"]) == (0, 40, {"skipped": 2.0})


def test_throughput_of_deepspeed_0_8_and_later():
    event = one(
        "throughput",
        "epoch=0/micro_step=34/global_step=34, RunningAvgSamplesPerSec=7.86, "
        "CurrSamplesPerSec=8.0, MemAllocated=59.65GB, MaxMemAllocated=63.31GB",
    )
    assert event["step"] == 34 and event["detail"] == {
        "epoch": 0.0,
        "micro_step": 34.0,
        "running_avg_samples_per_s": 7.86,
        "samples_per_s": 8.0,
        "mem_allocated_GiB": 59.65,
        "max_mem_allocated_GiB": 63.31,
    }


def test_throughput_before_0_8_says_its_count_is_not_a_step():
    seven = one(
        "throughput",
        "[Rank 0] step=10, skipped=0\n"
        "[timer.py:197:stop] 0/17, RunningAvgSamplesPerSec=158.3, CurrSamplesPerSec=159.6, "
        "MemAllocated=1.75GB, MaxMemAllocated=2.6GB",
    )
    assert seven["step"] == 10  # the last announced step, never 17
    assert seven["detail"] == {
        "epoch": 0.0,
        "timer_count": 17.0,
        "running_avg_samples_per_s": 158.3,
        "samples_per_s": 159.6,
        "mem_allocated_GiB": 1.75,
        "max_mem_allocated_GiB": 2.6,
        "ambiguous": OLD_THROUGHPUT_COUNT,
    }
    six = one("throughput", "[timer.py:166:stop] 0/320, SamplesPerSec=28.75")
    assert six["step"] is None and six["detail"]["running_avg_samples_per_s"] == 28.75
    assert six["detail"]["samples_per_s"] is None and six["detail"]["mem_allocated_GiB"] is None
    assert of("throughput", "loader10/320, SamplesPerSec=1") == []  # "10/320" inside a word: not the timer


def test_pipeline_engine_lines_are_throughput_with_their_step():
    plain = one("throughput", "steps: 70 loss: 2.1486 iter time (s): 0.443 samples/sec: 578.265")
    assert (plain["step"], plain["detail"]) == (
        70,
        {"loss": 2.1486, "iter_time_s": 0.443, "samples_per_s": 578.265},
    )
    moe = one(
        "throughput",
        "steps: 200 loss: 5.5508 lm loss: 5.5103 moe loss: 0.0405 iter time (s): 0.936 samples/sec: 136.706",
    )
    assert moe["step"] == 200 and moe["detail"]["iter_time_s"] == 0.936 and moe["detail"]["loss"] == 5.5508
    assert (
        str(one("throughput", "steps: 3 loss: nan iter time (s): 1.0 samples/sec: 2.0")["detail"]["loss"])
        == "nan"
    )


def test_memory_line():
    event = one("memory", "MA 4.96 GB         Max_MA 5.09 GB         CA 6.39 GB         Max_CA 6 GB ")
    assert event["detail"] == {"ma_GiB": 4.96, "max_ma_GiB": 5.09, "ca_GiB": 6.39, "max_ca_GiB": 6.0}


def test_deepspeed_wall_clock_needs_its_rank_marker():
    old = one("wall_clock", "[Rank 0] rank=0 time (ms) | forward: 652.41 | backward_inner: 2001.89")
    assert (old["rank"], old["detail"]) == (0, {"forward": 652.41, "backward_inner": 2001.89})
    new = one("wall_clock", "[Rank 1] time (ms) | fwd_microstep: 75.15 | step_microstep: 0.03")
    assert (new["rank"], new["detail"]) == (1, {"fwd_microstep": 75.15, "step_microstep": 0.03})
    assert timers(" a: 1 | b c: 2.5 | broken | d-e: 3 ") == {"a": 1.0, "b c": 2.5, "d-e": 3.0}


def test_megatron_and_neox_timers_are_their_own_kind():
    neox = one(
        "framework_timers",
        "time (ms) | forward: 659.86 | backward: 2164.69 | backward-backward: 2164.66 | "
        "batch generator: 0.83",
    )
    assert neox["detail"] == {
        "forward": 659.86,
        "backward": 2164.69,
        "backward-backward": 2164.66,
        "batch generator": 0.83,
    }  # "backward" is not overwritten by "backward-backward"
    unmarked = one("framework_timers", "time (ms) | forward: 1.0 | optimizer: 2.0")
    assert unmarked["detail"] == {"forward": 1.0, "optimizer": 2.0, "ambiguous": FRAMEWORK_TIMERS_UNMARKED}
    assert (
        of("wall_clock", "time (ms) | forward: 1.0") == []
        and of("framework_timers", "runtime (ms) | a: 1") == []
    )


# ---- fp16 overflow and the loss scale --------------------------------------------------------------------


def test_loss_scaler_overflow_wordings():
    text = (
        HEADER
        + "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but hysteresis is 2. "
        "Reducing hysteresis to 1\n"
        + HEADER
        + "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n"
        "[deepspeed] OVERFLOW! Rank 1 Skipping step.\n"
        "[deepspeed] fp16 dynamic loss scale overflow! Skipping step. Attempted loss scale: 131072.0, "
        "reducing to 65536.0\n"
        "[deepspeed] OVERFLOW! Skipping step. Attempted loss scale: 64, reducing to 32\n"
        "[Rank 0] Overflow detected. Skipping step. Attempted loss scale: 8388608.0, reducing to 4194304.0\n"
    )
    found = of("overflow", text)
    assert [(e["rank"], e["detail"]) for e in found] == [
        (0, {"attempted": 65536.0, "new": None}),
        (0, {"attempted": 65536.0, "new": 32768.0}),
        (1, {"attempted": None, "new": None}),
        (None, {"attempted": 131072.0, "new": 65536.0}),
        (None, {"attempted": 64.0, "new": 32.0}),
        (0, {"attempted": 8388608.0, "new": 4194304.0}),
    ]


def test_fused_optimizer_lines_and_scale_increases():
    text = (
        "Grad overflow on iteration 9\nGrad overflow on iteration: 12\n"
        "Reducing dynamic loss scale from 8192.0 to 4096.0\nIncreasing dynamic loss scale from 16384.0 to "
        "32768.0\n"
    )
    assert [e["step"] for e in of("overflow", text)] == [9, 12]
    assert one("loss_scale_reduced", text)["detail"] == {"attempted": 8192.0, "new": 4096.0}
    increase = one("loss_scale_increased", text)
    assert increase["detail"] == {"previous": 16384.0, "new": 32768.0} and increase["step"] == 12


def skips(text: str) -> list[dict]:
    return [e["detail"] for e in of("overflow_skip", text)]


def test_every_ranks_lines_of_one_skip_are_one_skip():
    text = "\n".join(
        ["Grad overflow on iteration 9"] * 4
        + ["Reducing dynamic loss scale from 8.0 to 4.0"] * 4
        + ["[Rank 0] Overflow detected. Skipping step. Attempted loss scale: 8.0, reducing to 4.0"]
    )
    assert skips(text) == [
        {
            "skip": 1,
            "lines": list(range(1, 10)),
            "ranks": [0],
            "iteration": 9,
            "attempted": 8.0,
            "scale_after": 4.0,
            "hysteresis": False,
        }
    ]
    assert one("overflow_skip", text)["step"] == 9


def test_successive_skips_of_every_rank_stay_apart_even_when_a_late_line_interleaves():
    text = "\n".join(
        [
            "Grad overflow on iteration 9",
            "Reducing dynamic loss scale from 8.0 to 4.0",
            "Grad overflow on iteration 10",
            "Reducing dynamic loss scale from 8.0 to 4.0",  # rank 2, late
            "Reducing dynamic loss scale from 4.0 to 2.0",
            "Grad overflow on iteration 9",
        ]
    )
    assert [(s["iteration"], s["attempted"], s["lines"]) for s in skips(text)] == [
        (9, 8.0, [1, 2, 4, 6]),
        (10, 4.0, [3, 5]),
    ]


def test_rank_zeros_identical_lines_are_successive_skips():
    line = "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 0, reducing to 0"
    assert [s["lines"] for s in skips(f"{line}\n{line}")] == [[1], [2]]


def test_identical_rankless_lines_at_a_scale_that_does_not_fall_are_one_skip_said_to_be_ambiguous():
    line = "Reducing dynamic loss scale from 1 to 1"
    assert skips(f"{line}\n{line}") == [
        {
            "skip": 1,
            "lines": [1, 2],
            "ranks": [],
            "iteration": None,
            "attempted": 1.0,
            "scale_after": 1.0,
            "hysteresis": False,
            "ambiguous": REPEATED_SKIP,
        }
    ]
    falling = "Reducing dynamic loss scale from 4 to 2"
    assert "ambiguous" not in skips(f"{falling}\n{falling}")[0]


def test_a_step_boundary_separates_skips_unless_a_line_names_the_same_one():
    boundary = "[Rank 0] step=10, skipped=1"
    assert (
        len(
            skips(
                f"Reducing dynamic loss scale from 1 to 1\n{boundary}\nReducing dynamic loss scale from 1 to "
                "1"
            )
        )
        == 2
    )
    assert (
        len(
            skips(
                f"Reducing dynamic loss scale from 4 to 2\n{boundary}\nReducing dynamic loss scale from 4 to "
                "2"
            )
        )
        == 1
    )
    assert len(skips(f"Grad overflow on iteration 7\n{boundary}\nGrad overflow on iteration 7")) == 1
    assert (
        len(skips("Grad overflow on iteration 7\n0/10, SamplesPerSec=1.0\nGrad overflow on iteration 8")) == 2
    )


def test_hysteresis_skips_keep_the_scale_and_count_down():
    text = "\n".join(
        f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 64, but hysteresis is {h}. "
        f"Reducing hysteresis to {h - 1}"
        for h in (3, 2)
    )
    text += "\nOVERFLOW! Rank 0 Skipping step. Attempted loss scale: 64, reducing to 32"
    found = skips(text)
    assert [(s["hysteresis"], s["scale_after"]) for s in found] == [(True, 64.0), (True, 64.0), (False, 32.0)]


def test_a_hysteresis_line_without_its_count_is_still_a_hysteresis_skip():
    assert skips("OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 64, but hysteresis is")[0][
        "hysteresis"
    ]


def test_fatal_loss_scale_and_two_ranks_on_one_line():
    text = (
        "ExceptionException: : Current loss scale already at minimum - cannot decrease scale anymore. "
        "Exiting run."
        "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."
    )
    assert [e["line"] for e in of("fatal_loss_scale", text)] == [1, 1]


# ---- tracebacks -----------------------------------------------------------------------------------------


def test_exception_lines():
    for line in (
        "RuntimeError: boom",
        "KeyboardInterrupt",
        "torch.distributed.elastic.errors.ChildFailedError: ",
        "Exception: Current loss scale",
        "SystemExit",
    ):
        assert is_exception_line(line), line
    for line in (
        "WARNING:torch.distributed:x",
        "ninja: no work to do.",
        "Time to load op: 1.0 seconds",
        "main()",
        "Failures",
        "",
        "    raise X",
    ):
        assert not is_exception_line(line), line


def test_tracebacks_of_two_prefixed_ranks_interleaved_keep_their_ranks():
    text = "\n".join(
        [
            "[rank0]: Traceback (most recent call last):",
            "[rank1]: Traceback (most recent call last):",
            '[rank1]:   File "b.py", line 2',
            '[rank0]:   File "a.py", line 1',
            "[rank0]: ValueError: zero",
            "[rank1]: KeyError: one",
        ]
    )
    found = of("traceback", text)
    assert [(e["rank"], e["message"], e["line"]) for e in found] == [
        (0, "ValueError: zero", 5),
        (1, "KeyError: one", 6),
    ]
    assert found[0]["detail"] == {
        "last_lines": ["Traceback (most recent call last):", '  File "a.py", line 1', "ValueError: zero"]
    }


def test_unprefixed_tracebacks_that_interleave_are_two_and_say_so():
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "a.py", line 1',
            "Traceback (most recent call last):",
            '  File "b.py", line 2',
            "ValueError: first",
            "KeyError: second",
        ]
    )
    found = of("traceback", text)
    assert [e["message"] for e in found] == ["ValueError: first", "KeyError: second"]
    assert all(e["detail"]["ambiguous"] == INTERLEAVED and e["rank"] is None for e in found)


def test_a_chained_exception_is_one_traceback():
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "a.py", line 1',
            "OSError: disk",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            '  File "b.py", line 2',
            "RuntimeError: save failed",
        ]
    )
    event = one("traceback", text)
    assert event["message"] == "RuntimeError: save failed" and event["line"] == 9
    assert "OSError: disk" in event["detail"]["last_lines"] and "ambiguous" not in event["detail"]


def test_a_traceback_cut_off_by_the_log_end_or_left_stale():
    cut = one("traceback", 'Traceback (most recent call last):\n  File "a.py", line 1\n    main()\n\n')
    assert (cut["line"], cut["message"], cut["detail"]["cut_off"]) == (3, "main()", True)
    stale = (
        'Traceback (most recent call last):\n  File "a.py", line 1\n'
        + "noise\n" * 9
        + 'Traceback (most recent call last):\n  File "b.py", line 2\nValueError: b\n'
    )
    found = of("traceback", stale)
    assert [(e["line"], e["detail"].get("cut_off"), "ambiguous" in e["detail"]) for e in found] == [
        (2, True, False),
        (14, None, False),
    ]


def test_frames_keep_their_traceback_open_and_are_never_events():
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            "2024-07-24 08:45:13.616",
            'File "x.py", line 3, in step',  # a paste lost the indentation
            '    raise Exception("Current loss scale already at minimum - cannot decrease scale anymore")',
            "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
        ]
    )
    assert [e["kind"] for e in read_events(text)] == ["traceback", "fatal_loss_scale"]
    assert one("traceback", text)["detail"]["last_lines"][1] == 'File "x.py", line 3, in step'


def test_a_rich_traceback_ends_at_its_box_and_the_exception_after_it():
    text = "\n".join(
        [
            "stderr: ╭──── Traceback (most recent call last) ────╮",
            "stderr: │ train.py:9 in main │",
            "stderr: ╰───────────────────────────────────────────╯",
            "stderr: RuntimeError: CUDA out of memory",
        ]
    )
    event = one("traceback", text)
    assert (event["line"], event["message"]) == (4, "RuntimeError: CUDA out of memory")


def test_a_traceback_under_a_host_prefix_names_its_host():
    text = (
        '10.141.250.231: Traceback (most recent call last):\n10.141.250.231:   File "a.py"\n10.141.250.231: '
        "OSError: x"
    )
    assert one("traceback", text)["detail"]["host"] == "10.141.250.231"
    assert one("traceback", "[default2]:Traceback (most recent call last):\n[default2]:OSError: y")[
        "detail"
    ] == {"last_lines": ["Traceback (most recent call last):", "OSError: y"], "local_rank": 2}


# ---- launcher exits -------------------------------------------------------------------------------------


def test_deepspeed_launcher_exit_with_and_without_a_local_rank():
    ranked = one(
        "rank_exit_error",
        "[launch.py:434:sigkill_handler] ['python', '-u', 'main.py', '--local_rank=0', "
        "'--x'] exits with return code = -9",
    )
    # Local rank 0 is the last and only process the launcher started: the one that exited.
    assert (ranked["rank"], ranked["detail"], ranked["step"]) == (
        0,
        {"code": -9.0, "started_local_ranks": 1},
        None,
    )
    later = one(
        "rank_exit_error",
        "[launch.py:325:sigkill_handler] ['python', '-u', 'main.py', '--local_rank=4'] exits with return "
        "code = -6",
    )
    assert (later["rank"], later["detail"]) == (
        None,
        {"code": -6.0, "started_local_ranks": 5, "ambiguous": LAST_STARTED.format(local_rank=4)},
    )
    bare = one(
        "launcher_exit_error",
        "[2023] [ERROR] [launch.py:321:sigkill_handler] ['bash', '-c', 'run.sh'] exits with return code = 1",
    )
    assert bare["rank"] is None and bare["detail"] == {
        "code": 1.0,
        "source": "deepspeed launcher",
        "ambiguous": NO_LOCAL_RANK,
    }
    assert one("rank_exit_ok", "[launch.py:285:main] Process 4847 exits successfully.")["detail"] == {}


def test_elastic_agent_line_and_summary_of_the_same_process_are_one_exit_with_the_global_rank():
    text = "\n".join(
        [
            "E0217 16:43:29.165000 355419 torch/distributed/elastic/multiprocessing/api.py:869] failed "
            "(exitcode: -9) "
            "local_rank: 1 (pid: 355716) of binary: /usr/bin/python3.11",
            "Root Cause (first observed failure):",
            "[0]:",
            "  host      : node-b",
            "",
            "  rank      : 9 (local_rank: 1)",
            "",
            "  exitcode  : -9 (pid: 355716)",
            "  traceback : Signal 9 (SIGKILL) received by PID 355716",
        ]
    )
    event = one("rank_exit_error", text)
    assert (event["rank"], event["line"]) == (9, 1)
    assert event["detail"] == {
        "code": -9.0,
        "pid": 355716,
        "local_rank": 1,
        "source": "torch elastic agent",
        "node": "node-b",
        "also_reported_at_lines": [8],
    }


def test_summary_exit_without_its_rank_line_is_not_an_exit():
    assert of("rank_exit_error", "  exitcode  : -9 (pid: 1)") == []


def test_called_process_error_is_an_exit_when_a_launcher_raised_it_or_it_ran_python():
    launcher = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/x/site-packages/deepspeed/launcher/launch.py", line 137, in sigkill_handler',
            "subprocess.CalledProcessError: Command '['/usr/bin/python', 'run.py']' returned non-zero exit "
            "status -11.",
        ]
    )
    event = one("launcher_exit_error", launcher)
    assert event["detail"] == {"code": -11.0, "source": "CalledProcessError", "ambiguous": NO_LOCAL_RANK}
    ranked = one(
        "rank_exit_error",
        "subprocess.CalledProcessError: Command '['/usr/bin/python3', '-u', 'main.py', "
        "'--local_rank=3']' returned non-zero exit status 1.",
    )
    assert (ranked["rank"], ranked["detail"]) == (
        None,  # torch's old launcher, like DeepSpeed's, raises with the last command it started
        {
            "code": 1.0,
            "source": "CalledProcessError",
            "started_local_ranks": 4,
            "ambiguous": LAST_STARTED.format(local_rank=3),
        },
    )
    ninja = "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1."
    assert [e["kind"] for e in read_events(ninja)] == []
    windows = (
        "subprocess.CalledProcessError: Command '['C:\\\\venv\\\\python.exe', 'a.py']' returned non-zero "
        "exit status 3."
    )
    assert one("launcher_exit_error", windows)["detail"]["code"] == 3.0


def test_slurm_reports_a_task_exit():
    event = one("launcher_exit_error", "srun: error: lexun-1: task 0: Exited with exit code 1")
    assert event["detail"] == {"code": 1.0, "source": "slurm", "node": "lexun-1", "task": 0}


def test_a_local_rank_on_several_nodes_says_so():
    text = "a-1: x\na-1: y\nb-2: ['python', '--local_rank=0'] exits with return code = 1\nb-2: z"
    event = one("rank_exit_error", text)
    assert event["rank"] == 0 and event["detail"]["ambiguous"] == LOCAL_RANK_ON_SEVERAL_NODES


# ---- NCCL and aborts ------------------------------------------------------------------------------------


def test_nccl_watchdog_timeouts_one_per_rank_and_collective():
    text = "\n".join(
        [
            "[rank6]:[E901 12:00:00.1 ProcessGroupNCCL.cpp:607] [Rank 6] Watchdog caught collective "
            "operation timeout: "
            "WorkNCCL(SeqNum=880, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for "
            "1800648 "
            "milliseconds before timing out.",
            "[rank6]:[E901 12:00:00.2 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 6] Exception (either an error or "
            "timeout) "
            "detected by watchdog at work: 880, last enqueued NCCL work: 882.",
            "[rank6]:  what():  [PG 0 Rank 6] Process group watchdog thread terminated with exception: "
            "[Rank 6] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=880, OpType=BROADCAST, Timeout(ms)=1800000)",
            "[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=881, "
            "OpType=ALLREDUCE) ran for 5 milliseconds before timing out.",
            "[PG ID 0 PG GUID 0(default_pg) Rank 6] Exception (either an error or timeout) detected by "
            "watchdog at work: 900",
        ]
    )
    found = of("nccl_timeout", text)
    assert [(e["rank"], e["detail"].get("seq"), e["line"]) for e in found] == [
        (6, 880.0, 1),
        (2, 881.0, 4),
        (6, 900.0, 5),
    ]
    assert found[0]["detail"] == {
        "seq": 880.0,
        "op": "BROADCAST",
        "timeout_ms": 1800000.0,
        "ran_for_ms": 1800648.0,
        "also_reported_at_lines": [2, 3],
    }
    assert found[1]["detail"] == {"seq": 881.0, "op": "ALLREDUCE", "ran_for_ms": 5.0}
    assert (
        one(
            "process_abort", "[rank3]:terminate called after throwing an instance of 'c10::DistBackendError'"
        )["rank"]
        == 3
    )


# ---- world size, DeepSpeed's config and step attribution -------------------------------------------------


def test_world_size_from_the_launcher_and_nccl():
    assert [
        e["detail"]["world_size"]
        for e in of(
            "world_info",
            "\n".join(
                [
                    "[launch.py:100:main] dist_world_size=2",
                    "WORLD INFO DICT: {'c05r2n11': [0, 1, 2, 3], 'gpu1505': [0]}",
                    "host:1:2 [3] NCCL INFO comm 0x55 rank 3 nranks 16 cudaDev 3 - Init COMPLETE",
                ]
            ),
        )
    ] == [2.0, 5.0, 16.0]


def test_deepspeed_config_facts():
    text = "\n".join(
        [
            "[Rank -1] DeepSpeed info: version=0.8.3+5317ca6, git-hash=unknown",
            "[Rank 0] Creating torch.bfloat16 ZeRO stage 2 optimizer",
            "Creating fp16 optimizer with dynamic loss scale",
            "[config.py:957:print]   fp16_enabled ................. True",
            "[config.py:957:print]   bf16_enabled ................. False",
            "[config.py:957:print]   train_batch_size ............. 8",
            "[config.py:957:print]   optimizer_name ............... adamw",
            "[config.py:957:print]   steps_per_print .............. 10",
        ]
    )
    assert [e["detail"] for e in of("ds_config", text)] == [
        {"deepspeed_version": "0.8.3+5317ca6"},
        {"precision": "bf16"},
        {"precision": "fp16"},
        {"fp16_enabled": True},
        {"bfloat16_enabled": False},
        {"train_batch_size": 8.0},
    ]
    assert launcher_log._config_value("adamw") == "adamw"


def test_stepless_lines_take_the_last_announced_step_and_failures_none():
    text = "\n".join(
        [
            "MA 1 GB Max_MA 1 GB CA 1 GB Max_CA 1 GB",
            "[Rank 0] step=20, skipped=0",
            "MA 1 GB Max_MA 1 GB CA 1 GB Max_CA 1 GB",
            "Current loss scale already at minimum - cannot decrease scale anymore",
            "steps: 30 loss: 1.0 iter time (s): 1.0 samples/sec: 1.0",
            "[Rank 0] time (ms) | fwd: 1",
        ]
    )
    assert [(e["kind"], e["step"]) for e in read_events(text)] == [
        ("memory", None),
        ("ds_progress", 20),
        ("memory", 20),
        ("fatal_loss_scale", None),
        ("throughput", 30),
        ("wall_clock", 30),
    ]


def test_events_are_in_line_order_with_tracebacks_first_on_their_line():
    text = (
        "[rank0]: Traceback (most recent call last):\n[rank0]:   x\n[rank0]: Exception: Current loss scale "
        "already "
        "at minimum - cannot decrease scale anymore"
    )
    assert [(e["kind"], e["line"]) for e in read_events(text)] == [("traceback", 3), ("fatal_loss_scale", 3)]
    assert read_events("") == [] and read_events("\n\n") == []


# ---- the edges of each rule -----------------------------------------------------------------------------


def test_hyphen_or_space_alone_marks_framework_timers():
    assert (
        "ambiguous"
        not in one("framework_timers", "time (ms) | forward-compute: 1.0 | optimizer: 2.0")["detail"]
    )
    assert (
        "ambiguous"
        not in one("framework_timers", "time (ms) | batch generator: 1.0 | optimizer: 2.0")["detail"]
    )


def test_a_hyphenated_name_without_digits_is_a_host():
    assert PrefixStyle.of(["gpu-node: a", "gpu-node: b"]).hosts == frozenset({"gpu-node"})


def test_frames_indented_by_one_space_and_rich_box_lines_are_kept():
    plain = one(
        "traceback", 'Traceback (most recent call last):\n File "a.py", line 1\n x = 1\nValueError: v'
    )
    assert plain["detail"]["last_lines"] == [
        "Traceback (most recent call last):",
        ' File "a.py", line 1',
        " x = 1",
        "ValueError: v",
    ]
    rich = one(
        "traceback", "╭─ Traceback (most recent call last) ─╮\n│ a.py:1 in main │\n╰──────────╯\nKeyError: k"
    )
    assert rich["detail"]["last_lines"] == [
        "╭─ Traceback (most recent call last) ─╮",
        "│ a.py:1 in main │",
        "╰──────────╯",
        "KeyError: k",
    ]


def test_a_broken_launcher_line_is_joined_over_six_lines_at_most():
    start = "x sigkill_handler] ['python', '--local_rank=1', "
    six = start + "\n" + "'a',\n" * 5 + "'b'] exits with return code = 2"
    assert one("rank_exit_error", six)["line"] == 1 and [m.line for m in messages(six)] == [1]
    seven = start + "\n" + "'a',\n" * 6 + "'b'] exits with return code = 2"
    assert of("rank_exit_error", seven) == [] and len(list(messages(seven))) == 8


def test_a_terminal_wrap_of_a_line_no_launcher_format_opens():
    width = 100
    progress = (
        "[2023-07-25 21:03:21,037] [INFO] [logging.py:96:log_dist] [Rank 0] step=35, skipped=0, "
        "lr=[2.1731931451279077e-06]"
    )
    assert progress[width:] == "451279077e-06]"  # the wrap cuts a number
    text = "\n".join(
        [
            progress[:width],
            progress[width:],
            "x" * width,
            "[Rank 0] step=36, skipped=1",
            "y" * 50,
            "tail",
            "w" * width,
        ]
    )
    found = list(messages(text))
    assert [m.line for m in found] == [1, 3, 4, 5, 6, 7]  # a shorter line ("y"s) is never continued
    assert found[0].text == progress and of("ds_progress", text)[0]["detail"] == {"skipped": 0.0}
    assert [(m.line, m.text) for m in messages("a" * width + "\n" + "b" * width + "\nbcd")] == [
        (1, "a" * width + "b" * width + "bcd")
    ]


def test_one_host_is_not_several_nodes():
    text = "node-1: x\nnode-1: ['python', '--local_rank=0'] exits with return code = 1"
    assert one("rank_exit_error", text)["detail"] == {"code": 1.0, "started_local_ranks": 1}


def test_an_exit_reported_three_times_is_one_with_every_other_line():
    text = "\n".join(
        [
            "failed (exitcode: -9) local_rank: 0 (pid: 7) of binary: python",
            "failed (exitcode: -9) local_rank: 0 (pid: 7) of binary: python",
            "  rank      : 4 (local_rank: 0)",
            "  exitcode  : -9 (pid: 7)",
        ]
    )
    event = one("rank_exit_error", text)
    assert event["rank"] == 4 and event["detail"]["also_reported_at_lines"] == [2, 4]
    several = (
        "a-1: x\na-1: failed (exitcode: -9) local_rank: 0 (pid: 7) of binary: python\na-1:   rank      : 4 "
        "(local_rank: 0)\na-1:   exitcode  : -9 (pid: 7)\nb-2: y\nb-2: z"
    )
    merged = one("rank_exit_error", several)
    assert merged["rank"] == 4 and "ambiguous" not in merged["detail"]  # the summary's rank is global
    slurm = "srun: error: n1: task 0: Exited with exit code 1"
    assert one("launcher_exit_error", f"{slurm}\n{slurm}")["detail"]["also_reported_at_lines"] == [2]


def test_a_summary_exit_needs_its_own_rank_line():
    text = "  rank      : 3 (local_rank: 3)\n  exitcode  : 1 (pid: 10)\n  exitcode  : 1 (pid: 11)"
    assert [(e["rank"], e["detail"]["pid"]) for e in of("rank_exit_error", text)] == [(3, 10)]


def test_a_launcher_traceback_makes_any_commands_exit_a_launcher_exit():
    raised = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/x/deepspeed/launcher/launch.py", line 137, in sigkill_handler',
            "subprocess.CalledProcessError: Command '['/bin/bash', 'train.sh']' returned non-zero exit "
            "status 2.",
        ]
    )
    assert one("launcher_exit_error", raised)["detail"]["code"] == 2.0
    elsewhere = raised.replace("deepspeed/launcher/launch.py", "torch/utils/cpp_extension.py")
    assert of("launcher_exit_error", elsewhere) == []
    later = (
        raised
        + "\nsubprocess.CalledProcessError: Command '['/bin/bash', 'b.sh']' returned non-zero exit status 3."
    )
    assert [e["detail"]["code"] for e in of("launcher_exit_error", later)] == [
        2.0
    ]  # the second raised by nothing


def test_a_skips_step_is_the_iteration_a_later_line_names():
    text = (
        "[Rank 0] step=10, skipped=0\nReducing dynamic loss scale from 8 to 4\nGrad overflow on iteration 12"
    )
    assert one("overflow_skip", text)["step"] == 12


def test_a_skip_event_follows_its_first_line_even_on_a_glued_line():
    glued = (
        "Grad overflow on iteration 9[2022-07-05 16:30:10,796] [INFO] x] Reducing dynamic loss scale from 8 "
        "to 4"
    )
    assert [e["kind"] for e in read_events(glued)] == ["overflow", "overflow_skip", "loss_scale_reduced"]


def test_each_step_boundary_counts_and_other_events_do_not_end_the_reading():
    line, boundary = "Reducing dynamic loss scale from 1 to 1", "[Rank 0] step=1, skipped=0"
    assert len(skips(f"{line}\n{boundary}\n{line}\n{boundary}\n{line}")) == 3
    memory = "MA 1 GB Max_MA 1 GB CA 1 GB Max_CA 1 GB"
    assert (
        len(
            skips(
                f"Reducing dynamic loss scale from 8 to 4\n{memory}\nReducing dynamic loss scale from 4 to 2"
            )
        )
        == 2
    )


def test_a_late_line_joins_the_skip_of_its_iteration():
    text = "\n".join(
        [
            "Grad overflow on iteration 9",
            "Reducing dynamic loss scale from 8 to 4",
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4, reducing to 2",
            "Grad overflow on iteration 9",
        ]
    )
    assert [s["lines"] for s in skips(text)] == [[1, 2, 4], [3]]


def test_exception_lines_with_trailing_space():
    assert is_exception_line("KeyboardInterrupt   ") and is_exception_line("OSError: x  ")


def test_a_traceback_that_is_only_its_header():
    assert one("traceback", "x\nTraceback (most recent call last):")["line"] == 2


def test_an_open_traceback_goes_stale_after_eight_messages_without_a_frame():
    def run(noise):
        return [
            e["detail"].get("cut_off", False)
            for e in of(
                "traceback",
                "Traceback (most recent call last):\n"
                "  f\n" + "noise\n" * noise + "Traceback (most recent call last):\nOSError: b\nKeyError: a\n",
            )
        ]

    assert run(7) == [False, False]  # still live: the two interleave
    assert run(8) == [True, False]


def test_a_chained_traceback_can_interleave_with_another():
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            "  f",
            "OSError: a",
            "During handling of the above exception, another exception occurred:",
            "Traceback (most recent call last):",
            "  g",
            "Traceback (most recent call last):",
            "  h",
            "KeyError: b",
            "ValueError: c",
        ]
    )
    found = of("traceback", text)
    assert [e["message"] for e in found] == ["KeyError: b", "ValueError: c"] and "OSError: a" in found[0][
        "detail"
    ]["last_lines"]


def test_a_skip_without_an_iteration_takes_the_last_step_and_a_bf16_skip_keeps_no_scale():
    assert (
        one("overflow_skip", "[Rank 0] step=10, skipped=0\nReducing dynamic loss scale from 8 to 4")["step"]
        == 10
    )
    bf16 = one("overflow_skip", "[Rank 0] step=7, skipped=0\n[deepspeed] OVERFLOW! Rank 0 Skipping step.")
    assert (bf16["step"], bf16["detail"]["hysteresis"], bf16["detail"]["scale_after"]) == (7, False, None)


def test_two_headers_in_a_row_are_two_tracebacks():
    text = "Traceback (most recent call last):\nTraceback (most recent call last):\nOSError: a\nKeyError: b"
    assert [e["message"] for e in of("traceback", text)] == ["OSError: a", "KeyError: b"]


# ---- which rank failed: prefixes, headless and reprinted tracebacks, newer watchdog lines, kills ---------


PREFIXES = ("> ", "worker-5: ", "[rank3]: ", "[default3]:")


def under(prefixes: tuple[str, ...], lines: list[str]) -> str:
    """The lines as a launcher would print them with ``prefixes`` stacked in that order (each line twice,
    so that the log-wide prefixes are recognised)."""
    return "\n".join("".join(prefixes) + line for line in lines)


def test_every_failure_pattern_is_read_under_prefixes_stacked_in_any_order():
    orders = [PREFIXES, PREFIXES[::-1], (PREFIXES[1], PREFIXES[0], PREFIXES[2]), (PREFIXES[0], PREFIXES[3])]
    for order in orders:
        traceback = one(
            "traceback",
            under(order, ["Traceback (most recent call last):", '  File "a.py", line 1', "OSError: x"]),
        )
        assert traceback["message"] == "OSError: x", order
        named = dict(traceback["detail"], rank=traceback["rank"])
        assert named.get("rank") == (3 if "[rank3]: " in order else None), order
        assert named.get("host") == ("worker-5" if "worker-5: " in order else None), order
        watchdog = under(
            order,
            [
                "[E901 1 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout: "
                "WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 9 milliseconds before timing out.",
                "x",
            ],
        )
        assert one("nccl_timeout", watchdog)["rank"] == 3, order
        exits = under(order, ["['python', '-u', 'a.py', '--local_rank=0'] exits with return code = -9", "x"])
        assert one("rank_exit_error", exits)["detail"]["code"] == -9.0, order
        overflow = under(
            order, ["[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 8, reducing to 4", "x"]
        )
        assert one("overflow_skip", overflow)["detail"]["scale_after"] == 4.0, order


def test_a_quote_is_a_prefix_only_when_it_leads_the_log_s_lines():
    assert PrefixStyle.of(["> a", ">", "> b"]).quoted and not PrefixStyle.of(["> a", "b"]).quoted
    quoted = "> [rank1]: Traceback (most recent call last):\n> \n> [rank1]: KeyError: k"
    assert one("traceback", quoted)["rank"] == 1


def test_a_traceback_without_its_header_starts_at_its_first_frame():
    frames = one(
        "traceback",
        'worker-5: [rank22]:   File "main.py", line 307, in <module>\nworker-5: [rank22]:     main()\n'
        "worker-5: [rank22]: RuntimeError: CUDA out of memory",
    )
    assert (frames["rank"], frames["detail"]["host"], frames["detail"]["header_cut"]) == (
        22,
        "worker-5",
        True,
    )
    caret = one("traceback", "                 ^^^^^^^^^^\ntorch.OutOfMemoryError: CUDA out of memory.")
    assert caret["message"] == "torch.OutOfMemoryError: CUDA out of memory." and caret["detail"]["header_cut"]
    rich = one("traceback", "│   113 │   x = f()   │\n╰───────────────╯\nException: expected value")
    assert rich["line"] == 3 and rich["detail"]["last_lines"][0] == "│   113 │   x = f()   │"
    # Lines that prove no traceback, followed by anything but an exception, are none.
    assert of("traceback", "^^^^\nnot an exception\nRuntimeError: later") == []
    assert of("traceback", "│ a table │\n╰─────────╯\n") == []


def test_the_traceback_a_childfailederror_summary_prints_again_is_not_read_again():
    child = [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "train.py", line 9, in main',
        "[rank0]: Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
        "Exiting run.",
    ]
    summary = [
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2021-10-05_17:37:22",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : 1 (pid: 3296201)",
        "  error_file: /tmp/torchelastic_x/none_3/attempt_0/0/error.json",
        "  traceback :",
        "  Traceback (most recent call last):",
        '    File "train.py", line 9, in main',
        "      raise Exception(msg)",
        "  Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
        "",
        "============================================================",
    ]
    events = read_events("\n".join(child + summary))
    assert [(e["kind"], e["rank"]) for e in events] == [
        ("traceback", 0),
        ("fatal_loss_scale", 0),
        ("rank_exit_error", 0),
    ]


def test_a_chained_exception_under_a_rank_prefix_is_one_traceback():
    text = "\n".join(
        [
            "[rank1]: Traceback (most recent call last):",
            '[rank1]:   File "a.py", line 1, in f',
            "[rank1]: OSError: disk",
            "",  # torch's excepthook leaves empty lines without the prefix
            "[rank1]: The above exception was the direct cause of the following exception:",
            "",
            "[rank1]: Traceback (most recent call last):",
            '[rank1]:   File "b.py", line 2, in g',
            "[rank1]: RuntimeError: save failed",
        ]
    )
    event = one("traceback", text)
    assert (event["rank"], event["message"]) == (1, "RuntimeError: save failed")


def test_a_traceback_through_a_launcher_says_so():
    agent = one(
        "traceback",
        'Traceback (most recent call last):\n  File "/x/torch/distributed/run.py", line 1, in main\n'
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    )
    assert agent["detail"]["launcher"] is True
    rich = one(
        "traceback",
        "╭──── Traceback (most recent call last) ────╮\n│ /x/bin/accelerate-launch:8 in <module> │\n"
        "╰──────────────────────────────────────────╯\nSystemExit: 1",
    )
    assert rich["detail"]["launcher"] is True
    assert "launcher" not in one("traceback", "Traceback (most recent call last):\nOSError: x")["detail"]


def test_newer_watchdog_lines_name_the_ranks_that_failed():
    text = "\n".join(
        [
            "[rank5]:[E1026 1 ProcessGroupNCCL.cpp:2241] [PG ID 1 PG GUID 1 Rank 5]  failure detected by "
            "watchdog at work sequence id: 55485 PG status: last enqueued work: 55487, last completed "
            "work: 55484",
            "[rank1]:[E521 1 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank 1] Timeout at "
            "NCCL work: 131, last enqueued NCCL work: 131, last completed NCCL work: 130.",
            "[rank2]:[E1026 1 ProcessGroupNCCL.cpp:730] Stack trace of the failed collective not found, "
            "potentially because FlightRecorder is disabled.",
            "[rank2]:[E1026 1 ProcessGroupNCCL.cpp:2573] [PG ID 1 PG GUID 1 Rank 2] First PG on this rank to "
            "signal dumping.",
            "[rank6]:[E429 1 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank 6] "
            "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress",
            "[rank7]:[E430 1 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank 7] Received a "
            "dump signal due to a collective timeout from this local rank and we will try our best to dump",
            "[rank0]:[E418 1 ProcessGroupNCCL.cpp:1890] [PG ID 0 PG GUID 0(default_pg) Rank 0] Received a "
            "dump signal due to a collective timeout from  rank 1 and we will try our best to dump",
            "[rank6]:[F429 1 ProcessGroupNCCL.cpp:1554] [PG ID 0 PG GUID 0(default_pg) Rank 6] [PG ID 0 PG "
            "GUID 0(default_pg) Rank 6] Terminating the process after attempting to dump debug info, "
            "due to x",
            "[rank4]:[E210 1 ProcessGroupNCCL.cpp:630] [Rank 4] Some NCCL operations have failed or timed "
            "out.",
            "[E ProcessGroupNCCL.cpp:456] Some NCCL operations have failed or timed out.",
        ]
    )
    assert [(e["rank"], e["detail"]) for e in of("nccl_timeout", text)] == [
        (5, {"seq": 55485.0}),
        (1, {"seq": 131.0}),
    ]
    assert [(e["rank"], e["detail"]) for e in of("watchdog_failure", text)] == [
        (2, {}),
        (2, {}),
        (6, {}),
        (7, {}),
        (1, {"reported_by": 0}),  # the rank whose timeout sent the signal
        (6, {}),
        (4, {}),
        (None, {}),
    ]
    # The [rankN]: prefix is the global rank; a subgroup's rank stays in the detail.
    sub = one("nccl_timeout", "[rank9]:[E1 1 x.cpp:1] [PG ID 3 PG GUID 5 Rank 1] Timeout at NCCL work: 8, x")
    assert (sub["rank"], sub["detail"]) == (9, {"seq": 8.0, "group_rank": 1})


def test_launcher_kills_and_zero_s_partition_count():
    assert one("launcher_kill", "[launch.py:318:sigkill_handler] Killing subprocess 80")["detail"] == {
        "pid": 80
    }
    assert one("processes", "Rank: 0 partition count [1, 1] and sizes[(6049711186, False), (1, False)]")[
        "detail"
    ] == {"processes": 1.0, "source": "ZeRO partition count"}
    several = "a-1: x\na-1: y\nb-2: z\nb-2: w"
    assert one("processes", several)["detail"]["processes"] == 2.0
