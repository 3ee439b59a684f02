"""No secret reaches a record, a log or the browser: whether it sits in a versioned field, an
unversioned field, an environment variable or an exception message."""

from __future__ import annotations

import json
import logging
import pathlib

import pytest

from marin_lab.browser.paths import Roots
from marin_lab.browser.preview import preview
from marin_lab.browser.records import Browser
from marin_lab.execution import Executor, ExecutorMainConfig, ExecutorStep, this_output_path, versioned
from marin_lab.execution.review.baseline import diff_versions
from marin_lab.io.secrets import REDACTED, SecretFilter, scrub_text
from tests.executor_steps import SecretConfig, leak_secrets

HF_TOKEN = "hf_" + "Zx81Qw72Er63Ty54Ui45Op36"
URL_PASSWORD = "Pa55-w0rd-Xyz"
URL_TOKEN = "QWERTY123456sig"
SOURCE_URL = f"https://alice:{URL_PASSWORD}@data.example.com/c.jsonl?token={URL_TOKEN}&part=1"
API_KEY = "k9x2Zq71Lm03Rt55"  # no recognisable shape: known as a secret only by its field's name
ENV_SECRET = "svc7Hq2Lw9Xp4Kd3"
SECRETS = (HF_TOKEN, URL_PASSWORD, URL_TOKEN, API_KEY, ENV_SECRET)


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def _files_leaking(root: pathlib.Path) -> dict[str, list[str]]:
    found = {}
    for path in root.rglob("*"):
        if path.is_file():
            leaks = _leaks(path.read_bytes().decode("utf-8", "replace"))
            if leaks:
                found[str(path.relative_to(root))] = leaks
    return found


def test_secrets_never_reach_records_or_logs(tmp_path, monkeypatch, caplog, capfd):
    monkeypatch.setenv("MARIN_TEST_SERVICE_TOKEN", ENV_SECRET)
    step = ExecutorStep(
        name="secrets/leaky",
        fn=leak_secrets,
        config=SecretConfig(
            output_path=this_output_path(),
            hf_token=versioned(HF_TOKEN),
            source_url=versioned(SOURCE_URL),
            api_key=API_KEY,
        ),
    )
    prefix = tmp_path
    report = Executor(ExecutorMainConfig(prefix=str(prefix), backend="local", max_failure_retries=0)).run(
        [step], raise_on_failure=False
    )
    assert report.failed, "the step raises: its error message is where secrets would leak"
    assert _files_leaking(prefix) == {}
    (ps,) = report.plan.steps
    info = json.loads((pathlib.Path(ps.output_path) / ".executor_info").read_text())
    # The record still says what happened: which field, which host, which error.
    assert info["attempts"][0]["error"] and "PermissionError: 401 for https://alice:" in info["attempts"][0]["error"]
    assert "data.example.com" in json.dumps(info["version"])
    out, err = capfd.readouterr()
    assert _leaks(out + err + caplog.text) == []
    assert "401 for" in caplog.text + err, "the failure is still logged, scrubbed"
    assert _leaks(report.outcomes[ps.identity].message or "") == []


def test_secret_identity_still_depends_on_the_secret_value():
    # Redaction is for what is written, never for what is hashed: two tokens are two identities.
    def plan(token):
        step = ExecutorStep(
            name="secrets/id",
            fn=leak_secrets,
            config=SecretConfig(output_path=this_output_path(), hf_token=versioned(token), source_url="u", api_key="k"),
        )
        return Executor(ExecutorMainConfig(prefix="/tmp/never-written", backend="local")).plan([step]).steps[0].identity

    assert plan(HF_TOKEN) != plan(HF_TOKEN + "x")


def test_explain_diff_never_prints_a_secret():
    lines = diff_versions(
        {"config": {"hf_token": "hf_old0123456789abcdefghij", "url": "https://a:b1@h/x"}},
        {"config": {"hf_token": HF_TOKEN, "url": SOURCE_URL}},
    )
    assert len(lines) == 2 and _leaks("\n".join(lines)) == [] and REDACTED in lines[0]


def test_browser_hides_secrets_in_records_written_before_redaction(tmp_path):
    # A record written by an older version (or by hand): secrets in clear in version and errors.
    step_dir = tmp_path / "secrets" / "old-12345678"
    step_dir.mkdir(parents=True)
    record = {
        "name": "secrets/old",
        "identity": "secrets/old-12345678",
        "output_path": str(step_dir),
        "version": {"name": "secrets/old", "config": {"hf_token": HF_TOKEN, "source_url": SOURCE_URL}},
        "attempts": [{"attempt": 1, "error": f"PermissionError: 401 for {SOURCE_URL} token {HF_TOKEN}"}],
    }
    (step_dir / ".executor_info").write_text(json.dumps(record))
    (step_dir / ".executor_status").write_text('{"status": "FAILED"}')
    roots = Roots.of([str(tmp_path)])
    served = Browser(str(tmp_path), roots).step(str(step_dir))
    assert _leaks(json.dumps(served)) == [] and served["record"]["attempts"][0]["error"].startswith("PermissionError")
    page = preview(roots, str(step_dir / ".executor_info"))
    assert _leaks(json.dumps(page)) == []


@pytest.mark.parametrize(
    "text, kept",
    [
        (f"GET {SOURCE_URL} failed", "https://alice:"),
        (f"Authorization: Bearer {API_KEY}0000", "Authorization: Bearer "),
        (f"token {HF_TOKEN} refused", "token "),
        ("gs://bucket/data?X-Goog-Signature=abcdef123456&x=1", "x=1"),
    ],
)
def test_scrub_text_removes_secret_shapes_and_keeps_the_rest(text, kept):
    clean = scrub_text(text)
    assert _leaks(clean) == [] and "abcdef123456" not in clean and kept in clean


def test_scrub_text_leaves_ordinary_words_and_settings():
    text = "the token representation of max_tokens=5 with tokenizer gpt2 at /tmp/keys"
    assert scrub_text(text) == text


def test_log_filter_scrubs_messages_and_tracebacks(monkeypatch):
    monkeypatch.setenv("MARIN_TEST_SERVICE_TOKEN", ENV_SECRET)
    try:
        raise RuntimeError(f"bad credentials {ENV_SECRET}")
    except RuntimeError:
        record = logging.getLogger("x").makeRecord(
            "x", logging.ERROR, __file__, 1, "auth %s failed", (ENV_SECRET,), exc_info=__import__("sys").exc_info()
        )
    assert SecretFilter().filter(record)
    text = logging.Formatter().format(record)
    assert ENV_SECRET not in text and "auth <redacted> failed" in text and "bad credentials <redacted>" in text


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "hostile", ["?" * 200_000, "://" + "a" * 200_000, "?" + "key" * 70_000, "x" * 200_000 + "://", "a://b:" * 40_000]
)
def test_scrubbing_is_linear_on_hostile_runs(hostile):
    # Unbounded repeats before a fixed part once made these quadratic: 20,000 characters took
    # 14 s, so 200,000 would take over 20 minutes; linear, each takes well under a second.
    assert len(scrub_text(hostile)) >= len(hostile) // 2


def test_a_shared_scrubber_for_a_listing_still_redacts_named_fields_and_environment_secrets(monkeypatch):
    """The browser takes one scrubber for thousands of statuses; nothing it would have hidden shows."""
    from marin_lab.io.secrets import redact, text_scrubber

    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-env-0123456789abcdef")
    shared = text_scrubber()
    out = redact(
        {"error": "auth failed with tok-env-0123456789abcdef", "nested": {"api_key": "key-named-9876543210fedcba"}},
        shared,
    )
    assert "tok-env-0123456789abcdef" not in str(out) and "key-named-9876543210fedcba" not in str(out)
    # the named field's value is remembered: later text holding it is scrubbed too
    assert "key-named-9876543210fedcba" not in str(redact({"message": "sent key-named-9876543210fedcba"}))


def test_a_secret_that_appears_after_a_first_write_is_still_scrubbed(monkeypatch):
    """Scrubbers and their answers are kept between writes (a step writes five files): a variable
    set, or a secret-named field met, after a text was first scrubbed still hides it from then on."""
    from marin_lab.io.secrets import redact

    late_env, late_field = "late-env-0123456789abcdef", "late-field-9876543210fedcba"
    record = {"message": f"calling with {late_env}", "url": f"s3://bucket/{late_field}/x"}
    assert redact(record) == record  # nothing secret yet: kept as it is, and remembered as clean
    assert scrub_text(record["message"]) == record["message"]

    monkeypatch.setenv("LATE_SERVICE_TOKEN", late_env)
    assert late_env not in str(redact(record)) and late_env not in scrub_text(record["message"])

    # a secret-named field in the same record hides its value everywhere else in it, at once
    out = redact({**record, "api_key": late_field})
    assert late_field not in json.dumps(out) and out["api_key"] == REDACTED
    assert late_field not in str(redact(record)) and late_field not in scrub_text(record["url"])

    monkeypatch.delenv("LATE_SERVICE_TOKEN")  # gone from the environment: no longer scrubbed
    assert scrub_text(f"calling with {late_env}") == f"calling with {late_env}"
