"""A misspelt keyword in a config a user builds names the closest valid field."""

from __future__ import annotations

import dataclasses

import pytest

from experiments.simple_train_config import SimpleTrainConfig
from marin_lab.execution import ExecutorStep
from marin_lab.models.llama import LlamaConfig
from marin_lab.processing.tokenize import TokenizeConfig
from marin_lab.resources import CpuOnlyConfig, GpuConfig
from marin_lab.training import OptimizerConfig
from marin_lab.versioning import field_hints


def test_simple_train_config_names_the_typo():
    with pytest.raises(
        TypeError,
        match=r"^SimpleTrainConfig has no field 'learning_rte'; did you mean "
        r"'learning_rate'\?$",
    ):
        SimpleTrainConfig(resources=CpuOnlyConfig(), train_batch_size=4, num_train_steps=10, learning_rte=3e-3)
    with pytest.raises(TypeError, match="'num_train_step'; did you mean 'num_train_steps'"):
        SimpleTrainConfig(CpuOnlyConfig(), 4, learning_rate=1e-3, num_train_step=10)
    with pytest.raises(TypeError, match="'lr_schedul'; did you mean 'lr_schedule'"):  # Marin's flat names too
        SimpleTrainConfig(CpuOnlyConfig(), 4, 10, learning_rate=1e-3, lr_schedul="cosine")


@pytest.mark.parametrize(
    ("cls", "kwargs", "meant"),
    [
        (LlamaConfig, {"hiden_dim": 64}, "hidden_dim"),
        (OptimizerConfig, {"learning_rate": 1e-3, "weight_decy": 0.1}, "weight_decay"),
        (GpuConfig, {"gpu_cont": 2}, "gpu_count"),
        (TokenizeConfig, {"input_path": "a", "output_path": "b", "tokeniser": "x"}, "tokenizer"),
        (ExecutorStep, {"name": "a", "fn": print, "config": None, "resource": None}, "resources"),
    ],
)
def test_library_configs_name_the_closest_field(cls, kwargs, meant):
    typo = next(k for k in kwargs if k != meant and k not in {f.name for f in dataclasses.fields(cls)})
    with pytest.raises(TypeError, match=f"^{cls.__name__} has no field '{typo}'; did you mean '{meant}'\\?$"):
        cls(**kwargs)


def test_replace_with_a_typo_names_it_too():
    with pytest.raises(TypeError, match="LlamaConfig has no field 'num_layer'; did you mean 'num_layers'"):
        dataclasses.replace(LlamaConfig(), num_layer=3)


def test_nothing_close_lists_the_fields_and_other_type_errors_pass_through():
    @field_hints
    @dataclasses.dataclass(frozen=True)
    class Small:
        width: int
        depth: int = 1

        def __post_init__(self):
            if not isinstance(self.width, int):
                raise TypeError("width must be an int")

    with pytest.raises(TypeError, match=r"^Small has no field 'colour' \(its fields are: width, depth\)$"):
        Small(width=1, colour="red")
    with pytest.raises(
        TypeError,
        match=r"^Small has no field 'colr' \(its fields are: width, depth\)\. Small has no "
        r"field 'dept'; did you mean 'depth'\?$",
    ):
        Small(width=1, colr="red", dept=2)
    with pytest.raises(TypeError, match="^width must be an int$"):
        Small(width="wide")
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        Small()
    assert Small(2, depth=3) == Small(width=2, depth=3)
