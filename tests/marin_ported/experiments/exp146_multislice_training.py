# Ported from Marin (https://github.com/marin-community/marin):
# experiments/exp146_multislice_training.py, commit 08703226f6718630bb78cb28b1fec2caa5b761e0. Test
# data for tests/marin_ported/test_ray_era_experiments.py; only import lines were changed:
# `marin.execution.executor` -> `marin_lab.execution`; the rest is Marin's text (our linter may re-
# sort an import block). Copyright The Marin Authors, licensed under the Apache License, Version 2.0
# (https://www.apache.org/licenses/LICENSE-2.0), distributed on an "AS IS" BASIS, WITHOUT WARRANTIES
# OR CONDITIONS OF ANY KIND. See docs/coming_from_marin.md.
"""
Train 1.4B models on standard datasets (e.g., SlimPajama) using multislice.
https://github.com/stanford-crfm/marin/issues/146
"""

from experiments.defaults import default_train
from experiments.exp72_baselines import fineweb_edu_tokenized
from experiments.llama import llama_1_4b
from experiments.simple_train_config import SimpleTrainConfig
from marin_lab.execution import executor_main

llama_1_4b_multislice_train_config = SimpleTrainConfig(
    tpu_type="v4-128",
    node_count=2,
    train_batch_size=1024,
    num_train_steps=10000,  # 4096 * 1024 * 10000 = 42B tokens
    learning_rate=3e-4,
    weight_decay=0.1,
)

fineweb_edu_model = default_train(
    name="fineweb-edu-1.4b-multislice",
    tokenized=fineweb_edu_tokenized,
    model_config=llama_1_4b,
    train_config=llama_1_4b_multislice_train_config,
)

############################################################

if __name__ == "__main__":
    executor_main(
        steps=[fineweb_edu_model],
        description="Train 1.4B models on standard datasets (SlimPajama 6B, SlimPajama, FineWebEdu).",
    )
