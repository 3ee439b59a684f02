# Ported from Marin (https://github.com/marin-community/marin):
# experiments/tutorial/exp1076_train_tiny_model.py, commit 4ddf4f10dd7ca3ed3306f8d788156e3d033a0d50.
# Test data for tests/marin_ported/test_ray_era_experiments.py; only import lines were changed:
# `marin.execution.executor` -> `marin_lab.execution`, `marin.resources` -> `marin_lab.resources`;
# the rest is Marin's text (our linter may re-sort an import block). Copyright The Marin Authors,
# licensed under the Apache License, Version 2.0 (https://www.apache.org/licenses/LICENSE-2.0),
# distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND. See
# docs/coming_from_marin.md.
"""
This is a tutorial on how to train a tiny model on a small dataset.

This is designed to run on a single **GPU**
"""

from experiments.defaults import default_tokenize, default_train
from experiments.llama import llama3_tokenizer, llama_nano
from experiments.simple_train_config import SimpleTrainConfig
from marin_lab.execution import executor_main
from marin_lab.resources import GpuConfig

wikitext_hf_id = "dlwh/wikitext_2_detokenized"
wikitext_tokenized = default_tokenize(
    name=wikitext_hf_id,
    dataset=wikitext_hf_id,
    tokenizer=llama3_tokenizer,
)


nano_train_config = SimpleTrainConfig(
    # Here we define the hardware resources we need.
    # TODO: AutoResources
    resources=GpuConfig(gpu_count=1),
    train_batch_size=32,
    num_train_steps=100,
    learning_rate=6e-4,
    weight_decay=0.1,
)

nano_wikitext_model = default_train(
    name="llama-nano-wikitext",
    # Steps can depend on other steps: wikitext_tokenized depends on wikitext
    tokenized=wikitext_tokenized,
    model_config=llama_nano,
    train_config=nano_train_config,
    tags=["llama", "nano", "wikitext", "tutorial"],
    # no point in running evals on such a tiny model
    eval_harness_tasks=[],
    use_default_validation=False,
)


if __name__ == "__main__":
    executor_main(
        steps=[
            wikitext_tokenized,
            nano_wikitext_model,
        ]
    )
