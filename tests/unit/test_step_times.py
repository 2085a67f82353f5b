"""The table of published step times (zerogate.config.step_times): the shipped table loads with its rows'
sources and stated setups, and a malformed row is refused with one line naming the file, the row and the
key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from zerogate.analysis.step_time_validation import INSIDE, NOT_JUDGED, OUTSIDE, judge, summary_line
from zerogate.bench.step_time_predict import cards_named, catalogue_box, lacking_on, needs, options
from zerogate.config.step_times import STEP_TIMES_FILE, parse_step_times, read_step_times
from zerogate.errors import InputError

REPO = Path(__file__).resolve().parents[2]
TABLE = STEP_TIMES_FILE


@pytest.fixture(scope="module")
def raw():
    return yaml.safe_load((REPO / TABLE).read_text())


def test_the_shipped_table_loads_with_at_least_eight_sourced_rows_each_with_a_figure():
    table = read_step_times(REPO / TABLE, TABLE)
    assert len(table.rows) >= 8
    for row in table.rows:
        assert row.source.url.startswith("https://") and row.source.quote
        assert row.published.seconds is not None or row.published.tokens_per_second_per_gpu is not None
        if row.model.config is not None:
            assert (REPO / row.model.config).is_file(), row.id
    frameworks = {row.setup.framework for row in table.rows}
    assert "deepspeed" in frameworks and frameworks - {"deepspeed"}
    assert any(row.setup.offload_optimizer == "cpu" for row in table.rows)


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("published", {"covers": "optimizer_step", "as_printed": "x"}, "published.seconds"),
        ("published", {"seconds": 1.0, "covers": "lunch", "as_printed": "x"}, "published.covers"),
        ("hardware", {"gpu": "A100", "total_gpus": 7}, "hardware.total_gpus"),
    ],
)
def test_a_malformed_row_is_refused_with_one_line_naming_the_file_row_and_key(raw, key, value, named):
    broken = {"rows": [dict(row) for row in raw["rows"]]}
    broken["rows"][1] = {**broken["rows"][1], key: value}
    with pytest.raises(InputError) as error:
        parse_step_times(broken, TABLE)
    line = str(error.value)
    assert "\n" not in line
    assert line.startswith(f"{TABLE}: rows[1] ({raw['rows'][1]['id']}): {named}"), line


def test_a_duplicate_id_is_refused(raw):
    doubled = {"rows": [raw["rows"][0], raw["rows"][0]]}
    with pytest.raises(InputError, match=TABLE):
        parse_step_times(doubled, TABLE)


# ---- judging (zerogate.analysis.step_time_validation) and what a row needs (zerogate.bench.step_time_rows)


def test_a_published_time_is_inside_outside_or_not_judged_when_a_term_has_no_figure():
    assert judge(10.0, (8.0, 12.0), []).verdict == INSIDE
    assert judge(13.0, (8.0, 12.0), []).verdict == OUTSIDE
    # Missing terms only add time: faster than the low end is a miss even so, slower cannot be judged.
    assert judge(7.0, (8.0, 12.0), ["all-gathers per micro-step"]).verdict == OUTSIDE
    assert judge(13.0, (8.0, 12.0), ["all-gathers per micro-step"]).verdict == NOT_JUDGED
    # A throughput is faster when larger.
    assert judge(3000.0, (1000.0, 2000.0), ["x"], faster_is_larger=True).verdict == OUTSIDE
    judged = judge(9.0, (6.0, 12.0), [])
    assert judged.width == 2.0 and abs(judged.error - 0.0) < 1e-12
    assert judge(1.0, None, ["compute"]).verdict == NOT_JUDGED
    line = summary_line([judge(10.0, (8.0, 12.0), []), judge(13.0, (8.0, 12.0), []), judge(1.0, None, ["c"])])
    assert line.startswith("inside 1/2 judged (50%; target 75%)") and "cannot be judged 1/3" in line


def test_what_a_row_leaves_unstated_is_named_or_bracketed_never_filled_in():
    rows = {row.id: row for row in read_step_times(REPO / TABLE, TABLE).rows}
    assert needs(rows["ds1635-gpt-1.35b-z3-offopt-1xrtx3090-update"])[0].startswith("model.config")
    assert needs(rows["cai4719-llama2-13b-z3-8xa100-fwdbwd"]) == []  # Llama 2 13B's config is shipped
    assert any("epoch" in need for need in needs(rows["hfblog-accelerate-gpt2-xl-z3-offboth-titanrtx-epoch"]))
    titan = rows["torchtitan-llama3-8b-fsdp2-64xa100-sel-layer"]
    assert needs(titan) == []
    bracketed = options(titan)  # dtype and GPUs per node unstated: every value they can take
    assert {option.dtype for option in bracketed} == {"fp16", "bf16"}
    assert {option.per_node for option in bracketed} == {1, 2, 4, 8}
    assert {option.checkpointing for option in bracketed} == {True}  # stated (selective: the ledger's full)
    pinned = options(rows["cai4719-llama2-13b-z3-offboth-8xa100-fwdbwd"])
    assert {option.pinned for option in pinned} == {True}
    assert {option.checkpointing for option in pinned} == {False, True}  # unstated


def test_a_card_named_without_its_variant_is_bracketed_over_the_catalogues_cards_of_that_name():
    rows = {row.id: row for row in read_step_times(REPO / TABLE, TABLE).rows}
    cai = rows["cai4719-llama2-13b-z3-8xa100-fwdbwd"]  # "NVIDIA A100", memory unstated
    assert {card.card for card in cards_named(cai)} == {
        "A100 SXM4 40GB",
        "A100 SXM4 80GB",
        "A100 PCIe 40GB",
        "A100 PCIe 80GB",
    }
    stated = cai.model_copy(
        update={"hardware": cai.hardware.model_copy(update={"gpu_memory_bytes": 80 * 2**30})}
    )
    assert {card.card for card in cards_named(stated)} == {"A100 SXM4 80GB", "A100 PCIe 80GB"}
    assert [card.card for card in cards_named(rows["tinyllama1-z2-2xrtx4090-throughput"])] == ["RTX 4090"]
    unknown = cai.model_copy(update={"hardware": cai.hardware.model_copy(update={"gpu": "NVIDIA Titan RTX"})})
    assert cards_named(unknown) == [] and {option.card for option in options(unknown)} == {None}


def test_a_gpu_the_catalogue_does_not_know_is_named_as_the_reason_with_its_nearest_cards(tmp_path, raw):
    from zerogate.bench.step_time_judged import check_table

    zenflow = next(r for r in raw["rows"] if r["id"] == "zenflow-qwen2.5-1.5b-z2-2xa100-40g")
    row = {**zenflow, "hardware": {**zenflow["hardware"], "gpu": "Tesla P100-PCIE-16GB"}}
    table = tmp_path / "unknown_card.yaml"
    table.write_text(yaml.safe_dump({**raw, "rows": [row]}))
    (result,) = check_table(REPO, str(table), [])
    assert result.judged.verdict == NOT_JUDGED and result.prediction.interval is None
    reason = result.prediction.missing[0]
    assert reason.startswith("hardware.gpu ('Tesla P100-PCIE-16GB' is not in the card catalogue")
    assert "nearest: V100-PCIE-16GB" in reason and reason in result.judged.why


def test_a_figure_whose_unit_the_source_does_not_state_is_shown_and_not_judged(tmp_path, raw):
    from zerogate.bench.step_time_judged import check_table

    zenflow = next(r for r in raw["rows"] if r["id"] == "zenflow-qwen2.5-1.5b-z2-2xa100-40g")
    read = "seconds per optimizer step"
    row = {**zenflow, "id": "unit-unstated", "published": {**zenflow["published"], "unit_unstated": read}}
    table = tmp_path / "unit_unstated.yaml"
    table.write_text(yaml.safe_dump({**raw, "rows": [zenflow, row]}))
    stated, unstated = check_table(REPO, str(table), [])
    assert stated.judged.verdict != NOT_JUDGED and stated.prediction.interval is not None
    assert unstated.judged.verdict == NOT_JUDGED
    assert unstated.prediction.interval == stated.prediction.interval
    assert unstated.judged.why.startswith(f"the source does not state its figure's unit (read as {read})")


def test_the_rows_box_is_the_catalogues_over_the_rows_nodes():
    rows = {row.id: row for row in read_step_times(REPO / TABLE, TABLE).rows}
    titan = rows["torchtitan-llama3-8b-fsdp2-64xa100-sel-layer"]
    (card,) = cards_named(titan)
    box = catalogue_box(titan, card, 8)
    assert box.nodes == 8 and len(box.gpus) == 8 and box.nvlink
    assert box.gpus[0].memory_bandwidth_gbps == card.memory_bandwidth.gbps and box.gpus[0].pcie is not None


def test_a_term_without_a_figure_on_some_bracketed_cards_names_them():
    rows = {row.id: row for row in read_step_times(REPO / TABLE, TABLE).rows}
    chosen = options(rows["cai4719-llama2-13b-z3-8xa100-fwdbwd"])
    # The catalogue has a latency for the SXM4 cards' NVLink among 8, none for the PCIe cards' peer-to-peer.
    for option in chosen:
        kinds = catalogue_box(rows["cai4719-llama2-13b-z3-8xa100-fwdbwd"], option.card, 8).collectives.kinds
        has_latency = bool(kinds) and kinds["all_gather"].latency_s is not None
        assert has_latency == ("SXM4" in option.card.card)
    pcie = ["A100 PCIe 40GB", "A100 PCIe 80GB"]
    assert lacking_on("x latency", pcie, chosen) == "x latency (on A100 PCIe 40GB, A100 PCIe 80GB)"
    every = sorted({option.card.card for option in chosen})
    assert lacking_on("x latency", every, chosen) == "x latency" == lacking_on("x latency", [], chosen)


def test_predictions_alone_show_each_interval_and_never_a_published_figure(tmp_path, raw, capsys):
    from zerogate.bench.step_time_rows import main

    row = next(r for r in raw["rows"] if r["id"] == "zenflow-qwen2.5-1.5b-z2-2xa100-40g")
    row["published"] = {**row["published"], "seconds": 0.987654, "as_printed": "REDACTED"}
    table = tmp_path / "blind.yaml"
    table.write_text(yaml.safe_dump({**raw, "rows": [row]}))
    assert main(["--table", str(table), "--predictions-only"]) == 0
    shown = capsys.readouterr().out
    assert "zenflow-qwen2.5-1.5b-z2-2xa100-40g: " in shown and "s per optimizer-step" in shown
    assert "0.9877" not in shown and "0.987654" not in shown
    assert "verdict" not in shown and "error" not in shown
    assert main(["--table", str(table)]) == 0  # the full table does show it, with its verdict
    assert "published 0.9877" in capsys.readouterr().out


def test_every_pre_registered_row_has_its_figure_left_out_and_is_in_the_table_with_one():
    table = {row.id: row for row in read_step_times(REPO / TABLE, TABLE).rows}
    files = sorted(
        path
        for path in (REPO / "docs/preregistered").glob("step_times_*.yaml")
        if not path.name.endswith(".predictions.yaml")
    )
    assert files
    for file in files:
        blind = read_step_times(file, str(file.relative_to(REPO))).rows
        for row in blind:
            assert row.published.as_printed == "REDACTED" and "#" in row.source.quote
            assert row.id in table and table[row.id].published.as_printed != "REDACTED"
