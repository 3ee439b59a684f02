"""lm-eval's per-call costs that do not change within a process are paid once: the environment it
records in every result, and the compilation of each prompt template."""

from __future__ import annotations

import lm_eval.evaluator
import lm_eval.utils

from marin_lab.evaluation import harness
from marin_lab.evaluation.harness import lm_eval_costs_once


def test_the_environment_is_collected_once_and_copied_into_every_result(monkeypatch):
    calls = []

    def collect(storage):
        calls.append(1)
        storage.update({"pretty_env_info": f"collected {len(calls)} time(s)", "lm_eval_version": "x"})

    monkeypatch.setattr(lm_eval.evaluator, "add_env_info", collect)
    monkeypatch.setattr(harness, "_ENV_INFO", {})
    first, second = {"results": 1}, {"results": 2}
    with lm_eval_costs_once():
        lm_eval.evaluator.add_env_info(first)
        lm_eval.evaluator.add_env_info(second)
    assert len(calls) == 1
    assert first == {"results": 1, "pretty_env_info": "collected 1 time(s)", "lm_eval_version": "x"}
    assert second == {**first, "results": 2}
    assert lm_eval.evaluator.add_env_info is collect  # put back afterwards


def test_a_prompt_template_compiles_once_and_renders_as_lm_eval_renders_it():
    original = lm_eval.utils.apply_template
    template = "Question: {{question}}\nAnswer:{{ ' ' + choices.text[0] | regex_replace('x', 'y') }}"
    doc = {"question": "Which is a fox?", "choices": {"text": ["xyz", "b"]}}
    before = harness._template.cache_info()
    with lm_eval_costs_once():
        got = [lm_eval.utils.apply_template(template, doc) for _ in range(3)]
    after = harness._template.cache_info()
    assert got == [original(template, doc)] * 3 == ["Question: Which is a fox?\nAnswer: yyz"] * 3
    assert after.misses - before.misses <= 1 and after.hits - before.hits >= 2
    assert lm_eval.utils.apply_template is original
