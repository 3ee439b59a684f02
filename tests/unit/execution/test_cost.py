"""Cost per artifact: accelerator-hours in the step record (preempted attempts included), the price
table and its refusals, the dry run's cost lines, `marin-lab status --cost`, and the browser's
numbers, which must be the CLI's on the same prefix."""

from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib
import urllib.request

import pytest

from marin_lab.browser.cost import experiment_cost as browser_experiment_cost
from marin_lab.browser.paths import Roots
from marin_lab.browser.records import Browser
from marin_lab.browser.server import start_in_thread
from marin_lab.cli import main as cli_main
from marin_lab.cluster.resources import GpuResources, TpuResources
from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path, versioned
from marin_lab.execution.errors import PreemptedError, PriceTableError
from marin_lab.execution.main import executor_main
from marin_lab.execution.plan.resources import RunOutcome, attach_hardware
from marin_lab.execution.record.usage import declared_accelerator, record_usage, usage_of
from marin_lab.execution.review.cost import format_money, step_cost
from marin_lab.execution.review.prices import DEFAULT_PRICES, KNOWN, default_prices, load_prices
from marin_lab.execution.run import backends
from marin_lab.store.step_record import Attempt, StepRecord, read_step_record
from tests.cost_fixtures import EXPECTED_STEPS, EXPECTED_TOTAL, V5E_256, build_costed_prefix
from tests.executor_steps import WriteConfig, five_step_dag, write_text


@pytest.fixture
def costed_prefix(tmp_path):
    return build_costed_prefix(tmp_path)


def attempt(n: int, kind: str | None, start: str, end: str | None, status: str, chips: int | None = None) -> Attempt:
    hardware = {"kind": "tpu", "type": "v5e-256", "slices": chips // 256, "chips": chips} if chips else None
    return Attempt(
        n,
        kind=kind,
        started=f"2026-11-20T{start}:00.000+00:00",
        ended=f"2026-11-20T{end}:00.000+00:00" if end else None,
        status=status,
        hardware=hardware,
    )


# ---- accelerator-hours -----------------------------------------------------------------------------


def test_accelerator_hours_count_every_ended_attempt_with_the_chips_it_held_preempted_ones_included():
    record = StepRecord(
        name="train/big",
        identity="train/big-11111111",
        resources={**V5E_256, "slices": [1, 2]},
        attempts=[
            attempt(1, "preemption", "10:00", "10:30", "FAILED", chips=512),  # 0.5 h x 512
            attempt(2, "failure", "10:30", "10:45", "FAILED"),  # no hardware: declared, 2 x 256
            attempt(3, None, "11:00", "12:00", "SUCCESS", chips=256),  # 1 h x 256
            attempt(4, None, "12:00", None, "RUNNING"),
        ],
    )  # still running: not yet
    usage = record_usage(record)
    assert usage["accelerator_hours"] == 512 * 0.5 + 512 * 0.25 + 256 * 1.0
    assert usage["preempted_accelerator_hours"] == 256.0
    assert (usage["attempts"], usage["preempted_attempts"]) == (3, 1)
    assert usage["wall_hours"] == 1.75
    assert usage["by_accelerator"] == {"tpu-v5e": 640.0}
    assert (usage["accelerator"], usage["chips"]) == ("tpu-v5e", 256)
    cost = step_cost(record.identity, record, default_prices())
    assert cost.money == pytest.approx(640 * DEFAULT_PRICES["tpu-v5e"])
    assert cost.text == "$768.00 (640 accelerator-hours on tpu-v5e x256, 256 of them preempted)"


@pytest.mark.parametrize(
    "resources, expected",
    [
        (None, ("cpu", 1.0)),
        ({"num_cpus": 4}, ("cpu", 4.0)),
        ({"num_gpus": 2, "accelerator_type": "A100-80G"}, ("gpu-a100-80gb", 2.0)),
        ({"num_gpus": 1}, ("gpu", 1.0)),
        ({"resources": {"TPU": 4}, "accelerator_type": "TPU-V4"}, ("tpu-v4", 4.0)),
        (TpuResources(tpu="v5e-256", slices=2).describe(), ("tpu-v5e", 512.0)),
        (TpuResources(tpu="v4-16").describe(), ("tpu-v4", 8.0)),  # v4 names count cores: 16 cores, 8 chips
        (TpuResources(tpu="v5litepod-16", slices=[1, 2]).describe(), ("tpu-v5e", 32.0)),  # elastic: the most it asks
        (GpuResources(gpus=8, accelerator_type="H100").describe(), ("gpu-h100", 8.0)),
        ({"kind": "scripted"}, (None, None)),  # another runner: unknown, never guessed
    ],
)
def test_declared_resources_say_which_accelerator_and_how_many(resources, expected):
    assert declared_accelerator(resources) == expected


def test_a_runner_of_unknown_kind_has_hours_but_unknown_accelerator_hours():
    record = StepRecord(
        identity="x/y-1", resources={"kind": "scripted"}, attempts=[attempt(1, None, "10:00", "11:00", "SUCCESS")]
    )
    usage = record_usage(record)
    assert usage["wall_hours"] == 1.0 and usage["accelerator_hours"] is None and usage["unknown_attempts"] == 1
    assert (
        step_cost("x/y-1", record, default_prices()).text == "unknown (unknown accelerator-hours on unknown "
        "hardware x?)"
    )


@dataclasses.dataclass(frozen=True)
class SliceRunner:
    """Places 'one v5e-8 slice' in the driver: preempted on the first call, succeeds on the second."""

    calls: list = dataclasses.field(default_factory=list, compare=False)

    def describe(self) -> dict:
        return {**V5E_256, "tpu": "v5e-8", "hosts_per_slice": 1, "chips_per_slice": 8}

    def validate(self) -> None:
        pass

    def run(self, fn, config, *, step_name, cancel=None) -> RunOutcome:
        self.calls.append(step_name)
        hardware = {"kind": "tpu", "type": "v5e-8", "slices": 1, "hosts": 1, "chips": 8}
        if len(self.calls) == 1:
            err = PreemptedError(f"step {step_name!r} lost its slice")
            attach_hardware(err, hardware)
            raise err
        return RunOutcome(fn(config), hardware)


def test_the_record_holds_accelerator_hours_of_every_attempt_and_the_identity_does_not_change(tmp_path, monkeypatch):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: True)  # the runner runs fn in the driver
    monkeypatch.setattr(backends, "_RAY_USERS", 0)

    def make(resources):
        return ExecutorStep(
            name="cost/a",
            fn=write_text,
            resources=resources,
            config=WriteConfig(output_path=this_output_path(), text=versioned("x")),
        )

    report = Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="ray", max_preemption_retries=1)).run(
        [make(SliceRunner())]
    )
    out = report.plan.steps[0].output_path
    record = read_step_record(out)
    assert [a.kind for a in record.attempts] == ["preemption", None]
    spans = [
        (datetime.datetime.fromisoformat(a.ended) - datetime.datetime.fromisoformat(a.started)).total_seconds()
        for a in record.attempts
    ]
    usage = json.loads(pathlib.Path(out, ".executor_info").read_text())["usage"]
    assert usage["attempts"] == 2 and usage["preempted_attempts"] == 1
    assert usage["accelerator_hours"] == pytest.approx(8 * sum(spans) / 3600, abs=1e-6)
    assert usage["preempted_accelerator_hours"] == pytest.approx(8 * spans[0] / 3600, abs=1e-6)
    assert usage["by_accelerator"].keys() == {"tpu-v5e"}
    # The record is not hashed: the same step without resources plans to the same identity.
    assert (
        Executor(ExecutorMainConfig(prefix=str(tmp_path), backend="local")).plan([make(None)]).steps[0].identity
        == record.identity
    )


def test_an_older_record_without_usage_is_measured_when_read():
    raw = {
        "schema": 1,
        "identity": "a/b-1",
        "resources": {"num_cpus": 2},
        "status": "SUCCESS",
        "attempts": [
            {
                "attempt": 1,
                "kind": None,
                "started": "2026-01-01T00:00:00Z",
                "ended": "2026-01-01T03:00:00Z",
                "status": "SUCCESS",
                "error": None,
                "driver": "d",
            }
        ],
    }
    record = StepRecord.from_json(raw)
    assert record.usage is None and "usage" not in record.to_json()  # an older record keeps its bytes
    assert usage_of(record)["accelerator_hours"] == 6.0


# ---- the price table ------------------------------------------------------------------------------


def test_a_price_file_overrides_entries_and_keeps_the_other_defaults(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"date": "2026-11-01", "source": "our contract", "prices": {"tpu-v5e": 0.84, "gpu": 2}}))
    table = load_prices(str(path))
    assert table.price("tpu-v5e") == 0.84 and table.price("gpu") == 2.0
    assert table.price("tpu-v4") == DEFAULT_PRICES["tpu-v4"]
    assert table.describe() == (
        f"prices: {path} (our contract, USD per accelerator-hour, 2026-11-01) over the default list prices"
    )
    toml = tmp_path / "prices.toml"
    toml.write_text('currency = "EUR"\n[prices]\n"tpu-v6e" = 2.5\n')
    eur = load_prices(str(toml))
    assert eur.price("tpu-v6e") == 2.5 and eur.price("tpu-v5e") is None  # no USD defaults in a EUR table
    assert format_money(12.5, eur.currency) == "EUR 12.50"


@pytest.mark.parametrize(
    "content, message",
    [
        ({"prices": {"tpu-v7x": 1.0}}, "entry 'tpu-v7x' is not a known accelerator; known: " + ", ".join(KNOWN)),
        (
            {"prices": {"tpu-v5e": -1.2}},
            "entry 'tpu-v5e' is -1.2, a negative price; give USD per accelerator-hour, 0 or more",
        ),
        (
            {"prices": {"gpu-h100": "cheap"}},
            "entry 'gpu-h100' is 'cheap', not a number; give USD per accelerator-hour, 0 or more",
        ),
        ({"prices": {"cpu": True}}, "entry 'cpu' is True, not a number"),
        ({"price": {"cpu": 1}}, "key 'price' is not known; a price table has prices, currency, date, source"),
        ([1, 2], "the price table is list, expected an object"),
        ({"currency": "USD"}, '"prices" is missing'),
    ],
)
def test_a_bad_price_table_is_refused_in_one_line_naming_the_file_and_entry(tmp_path, content, message):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(content))
    with pytest.raises(PriceTableError) as err:
        load_prices(str(path))
    text = str(err.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text


def test_unreadable_or_malformed_price_files_are_one_line(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text("{ not json")
    with pytest.raises(PriceTableError, match=r"p\.json: not valid JSON \(.* at line 1\)"):
        load_prices(str(bad))
    with pytest.raises(PriceTableError, match=r"nope\.json: cannot read the price table"):
        load_prices(str(tmp_path / "nope.json"))


# ---- the dry run ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_plan_shows_estimated_cost_and_what_reuse_saves(tmp_path, capsys):
    prefix = str(tmp_path / "store")
    # Each step works 0.3 s, longer than the driver's poll: a step that ends before it is seen
    # starting has its time counted as queued, and usage is kept to 1e-6 hours (3.6 ms of a CPU).
    Executor(ExecutorMainConfig(prefix=prefix, backend="local")).run(five_step_dag(sleep_s=0.3))
    capsys.readouterr()
    # Only proc/b selected: it and raw/a are reused; the rest is not selected and not costed.
    Executor(ExecutorMainConfig(prefix=prefix, backend="local", cost=True)).run(
        five_step_dag(sleep_s=0.3), run_only=["^proc/b$"], dry_run=True
    )
    out = capsys.readouterr().out
    assert "  cost: 2 steps reused, saved by reuse: $" in out and out.count("saved by reuse (") == 2
    # raw/a changes: every step downstream of it would run again; nothing is reused.
    executor_main(
        steps=five_step_dag(text="A", sleep_s=0.3), args=["--prefix", prefix, "--dry_run", "true", "--format", "json"]
    )
    plan = json.loads(capsys.readouterr().out)
    by_name = {s["name"]: s for s in plan["steps"]}
    old = {name: read_step_record(f"{prefix}/{s['identity']}") for name, s in by_name.items()}
    assert all(s["action"] == "run" for s in by_name.values())
    a = by_name["raw/a"]["cost"]
    old_a = next(r for r in _versions(prefix, "raw/a"))
    assert a["basis"] == f"as {old_a.identity}"  # estimated from the earlier version's record
    assert a["accelerator_hours"] == usage_of(old_a)["accelerator_hours"] > 0
    assert a["money"] == pytest.approx(a["accelerator_hours"] * DEFAULT_PRICES["cpu"])
    assert all(r is None for r in old.values())  # the new versions have no records of their own yet
    assert plan["cost"]["run"]["steps"] == 5 and plan["cost"]["run"]["unknown"] == 0
    assert plan["cost"]["run"]["accelerator_hours"] == pytest.approx(
        sum(s["cost"]["accelerator_hours"] for s in plan["steps"]), abs=1e-5
    )

    # The unchanged DAG: every step is reused, and the plan says what that saved, from the records.
    executor_main(steps=five_step_dag(), args=["--prefix", prefix, "--dry_run", "true", "--cost", "true"])
    text = capsys.readouterr().out
    assert (
        text.splitlines()[1] == '  prices: default on-demand list prices (docs/executor.md, "Cost"), USD per '
        "accelerator-hour, listed 2025"
    )
    assert text.splitlines()[2] == "  cost: 0 steps would run, estimated: $0.00 (0.00 accelerator-hours)"
    assert text.splitlines()[3].startswith("  cost: 5 steps reused, saved by reuse: $")
    recorded = usage_of(_versions(prefix, "final/e")[0])["accelerator_hours"]
    assert f"cost: {format_money(recorded * DEFAULT_PRICES['cpu'])} saved by reuse (" in text

    executor_main(
        steps=five_step_dag(text="A", sleep_s=0.3),
        args=["--prefix", prefix, "--dry_run", "true", "--format", "markdown"],
    )
    markdown = capsys.readouterr().out
    assert "### Cost" in markdown and "- 5 steps would run, estimated: $" in markdown
    assert f"| run | `{by_name['raw/a']['identity']}` | $" in markdown


def test_a_to_run_step_with_no_record_anywhere_is_unknown(tmp_path, capsys):
    executor_main(steps=five_step_dag(), args=["--prefix", str(tmp_path), "--dry_run", "true", "--cost", "true"])
    out = capsys.readouterr().out
    assert "  cost: 5 steps would run, estimated: unknown for all 5\n" in out
    assert out.count("cost: unknown (no finished version recorded)") == 5


def test_a_plan_of_cpu_steps_has_no_cost_lines_without_cost(tmp_path, capsys):
    executor_main(steps=five_step_dag(), args=["--prefix", str(tmp_path), "--dry_run", "true"])
    out = capsys.readouterr().out
    assert "cost" not in out and "prices" not in out
    assert len(out.splitlines()) == 1 + 5 * 2  # the summary, then each step's action and output path


@dataclasses.dataclass(frozen=True)
class BigTrainConfig:
    def plan_estimate(self) -> dict:
        return {"accelerator": "v5p-128 x2", "chips": 128, "accelerator_hours": 1000}


def test_a_step_never_run_is_estimated_from_its_config_when_it_gives_accelerator_hours(tmp_path):
    from types import SimpleNamespace

    from marin_lab.execution.review.baseline import RecordIndex
    from marin_lab.execution.review.cost import estimate_plan

    ps = SimpleNamespace(
        identity="train/big-1",
        name="train/big",
        output_path=str(tmp_path / "train/big-1"),
        step=SimpleNamespace(config=BigTrainConfig(), resources=None),
    )
    decisions = [SimpleNamespace(step=ps, action="run")]
    plan = estimate_plan(decisions, default_prices(), RecordIndex(str(tmp_path)))
    estimate = plan.steps["train/big-1"]
    assert estimate.money == pytest.approx(1000 * DEFAULT_PRICES["tpu-v5p"])
    assert estimate.text == "$4,200.00 estimated (1,000 accelerator-hours, the config's estimate on tpu-v5p)"
    # A bucket that cannot be read without credentials: the config's estimate still stands, records are not read.
    assert estimate_plan(decisions, default_prices(), None).steps["train/big-1"] == estimate
    plain = SimpleNamespace(
        step=SimpleNamespace(
            identity="raw/x-1",
            name="raw/x",
            output_path="gs://b/raw/x-1",
            step=SimpleNamespace(config=None, resources=None),
        ),
        action="skip",
    )
    assert estimate_plan([plain], default_prices(), None).steps["raw/x-1"].text == "unknown (records not read)"


def test_a_bad_prices_flag_stops_the_run_in_one_line(tmp_path, capsys):
    bad = tmp_path / "prices.json"
    bad.write_text(json.dumps({"prices": {"tpu-v5e": -1}}))
    with pytest.raises(SystemExit):
        executor_main(
            steps=five_step_dag(), args=["--prefix", str(tmp_path), "--dry_run", "true", "--prices", str(bad)]
        )
    assert capsys.readouterr().err.strip() == (
        f"error: {bad}: entry 'tpu-v5e' is -1, a negative price; give USD per accelerator-hour, 0 or more"
    )


def _versions(prefix: str, name: str) -> list[StepRecord]:
    folder = pathlib.Path(prefix, name).parent
    base = pathlib.Path(name).name
    return [read_step_record(str(p)) for p in sorted(folder.glob(f"{base}-*"))]


# ---- status --cost and the browser ----------------------------------------------------------------


def test_status_cost_prints_each_step_the_experiment_and_what_reuse_saved(costed_prefix, capsys):
    assert cli_main(["status", str(costed_prefix), "--cost"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == default_prices().describe()
    for identity, text in EXPECTED_STEPS.items():
        assert any(line.strip().endswith(f"{identity}  {text}") for line in lines), (identity, lines)
    assert f"    {EXPECTED_TOTAL}" in lines
    assert cli_main(["status", str(costed_prefix)]) == 0  # without --cost: no cost
    assert "accelerator-hours" not in capsys.readouterr().out


def test_status_cost_with_a_bad_price_table_is_one_line(costed_prefix, tmp_path, capsys):
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"prices": {"tpu-v9": 1}}))
    assert cli_main(["status", str(costed_prefix), "--prices", str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {bad}: entry 'tpu-v9' is not a known accelerator") and "\n" not in err


def test_the_browser_shows_the_numbers_the_cli_prints_on_the_same_prefix(costed_prefix, tmp_path, capsys):
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"source": "contract", "date": "2026-11", "prices": {"tpu-v5e": 1.0, "gpu": 2.0}}))
    assert cli_main(["status", str(costed_prefix), "--prices", str(prices)]) == 0
    cli_lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    table = load_prices(str(prices))
    browser = Browser(str(costed_prefix), Roots.of([str(costed_prefix)]), prices=table)
    data = browser_experiment_cost(browser, "costed-abcdef12")
    assert data["text"] in cli_lines
    assert data["text"] == (
        "cost: $386.25 (393 accelerator-hours); saved by reuse: $0.25 (8.00 accelerator-hours, 1 step)"
    )
    for row in data["steps"]:
        assert any(line.endswith(f"{row['identity']}  {row['text']}") for line in cli_lines), row
    assert data["prices"] == cli_lines[0] == table.describe()
    # Goodput, the same words in both: the preempted attempt of train/big is badput.
    assert data["goodput_text"] in cli_lines and data["goodput_text"].startswith(
        "goodput 66% (256 of 385 chip-hours kept"
    )
    big = next(row for row in data["steps"] if row["identity"] == "train/big-11111111")
    assert big["goodput_text"] in cli_lines and "lost 128" in big["goodput_text"]
    step = browser.step(str(costed_prefix / "train/big-11111111"))
    assert step["cost"]["text"] == "$384.00 (384 accelerator-hours on tpu-v5e x256, 128 of them preempted)"
    assert step["cost"]["money"] == 384.0 and step["cost"]["accelerator_hours"] == 384.0
    # The same answer over HTTP, and the page's script is served.
    with start_in_thread(str(costed_prefix), prices=table) as server:
        with urllib.request.urlopen(f"{server.url}/api/experiments/costed-abcdef12/cost") as response:
            assert json.loads(response.read())["steps"] == data["steps"]
        with urllib.request.urlopen(f"{server.url}/static/cost.js") as response:
            assert b"fillCost" in response.read()
