"""Secrets never enter records; tokenizer settings and token counts do."""

import pytest

from marin_lab.execution.record.provenance import recorded_env
from marin_lab.io.secrets import REDACTED, is_secret_field, is_secret_name, redact


@pytest.mark.parametrize(
    "name",
    [
        "api_key",
        "HF_TOKEN",
        "token",
        "db_password",
        "awsSecretAccessKey",
        "access_token",
        "wandb_api_key",
        "credentials",
        "auth_token",
    ],
)
def test_secret_fields(name):
    assert is_secret_field(name)


@pytest.mark.parametrize(
    "name",
    [
        "tokenizer",
        "tokens",
        "eos_token",
        "bos_token",
        "special_tokens",
        "pad_token",
        "num_tokens",
        "tokenizer_revision",
        "keyword",
        "monkey",
        "max_token",
    ],
)
def test_not_secret_fields(name):
    assert not is_secret_field(name)


def test_redact_nested_and_values():
    got = redact(
        {
            "tokenizer": "gpt2",
            "eos_token": "<|endoftext|>",
            "tokens": 123,
            "wandb": {"api_key": "abc"},
            "note": "use sk-abcdefghijklmnopqrstuv now",
            "list": [{"hf_token": "x"}, "hf_abcdefghijklmnopqrstuvwxyz12"],
        }
    )
    assert got["tokenizer"] == "gpt2" and got["eos_token"] == "<|endoftext|>" and got["tokens"] == 123
    assert got["wandb"]["api_key"] == REDACTED and got["list"][0]["hf_token"] == REDACTED
    assert "sk-abc" not in got["note"] and got["list"][1] == REDACTED


def test_environment_variables_use_the_broad_rule(monkeypatch):
    monkeypatch.setenv("MARIN_MONKEY_TOKEN_COUNT", "1")
    monkeypatch.setenv("MARIN_VISIBLE", "1")
    assert is_secret_name("MARIN_MONKEY_TOKEN_COUNT")
    env = recorded_env()
    assert "MARIN_VISIBLE" in env and "MARIN_MONKEY_TOKEN_COUNT" not in env
