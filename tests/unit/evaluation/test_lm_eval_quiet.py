"""lm-eval's progress chatter stays out of a run's console and step log; its warnings do not."""

from __future__ import annotations

import logging

from marin_lab.evaluation.harness import quiet_lm_eval


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _log_all() -> None:
    logging.getLogger("lm_eval.evaluator").info("Setting random seed to 1234")
    logging.getLogger("lm_eval.evaluator").warning("Overwriting default num_fewshot of piqa from None to 0")
    logging.getLogger("lm_eval.api.task").warning("[Task: copa] metric acc is defined, but aggregation is not")
    logging.getLogger("marin_lab.evaluation.evaluate_lm").info("eval task piqa: acc 0.48")


def test_lm_eval_info_and_its_bars_are_kept_out_while_it_runs(monkeypatch):
    monkeypatch.delenv("MARIN_LAB_VERBOSE", raising=False)
    root = logging.getLogger()
    handler = _Collect()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        import lm_eval.api.task

        handler.lines.clear()  # what importing lm-eval (and datasets) logged
        with quiet_lm_eval():
            assert lm_eval.api.task.tqdm(range(3)).disable  # "Building contexts" draws nothing
            _log_all()
        assert handler.lines == [
            "[Task: copa] metric acc is defined, but aggregation is not",
            "eval task piqa: acc 0.48",
        ]
        assert not lm_eval.api.task.tqdm(range(3), disable=False).disable  # put back
        handler.lines.clear()
        _log_all()  # outside, nothing is filtered
        assert len(handler.lines) == 4
        handler.lines.clear()
        monkeypatch.setenv("MARIN_LAB_VERBOSE", "1")
        with quiet_lm_eval():
            _log_all()
        assert len(handler.lines) == 4
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
