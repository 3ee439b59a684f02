# Ported from Marin (https://github.com/marin-community/marin):
# experiments/tutorial/exp1096_datashop_example.py, commit 54cbce7e2c2a960f4363a6a0556791b05ffd9ac1.
# Test data for tests/marin_ported/test_ray_era_experiments.py; no line needed a change (it imports
# no `marin.` module); the rest is Marin's text (our linter may re-sort an import block). Copyright
# The Marin Authors, licensed under the Apache License, Version 2.0
# (https://www.apache.org/licenses/LICENSE-2.0), distributed on an "AS IS" BASIS, WITHOUT WARRANTIES
# OR CONDITIONS OF ANY KIND. See docs/coming_from_marin.md.
from experiments.datashop.datashop_datasets import datashop_dclm_tutorial_subset
from experiments.datashop.datashop_runner import DatashopRunner, DatashopRunnerConfig
from experiments.exp939_finemath import FINEMATH_DATA_FILTER_PROMPT

datashop_runner = DatashopRunner(
    DatashopRunnerConfig(
        experiment_name="datashop-tutorial",
        annotator_model_name="Llama-3.3-70B-Instruct",
        pretraining_data_path=datashop_dclm_tutorial_subset,
        annotator_data_path=datashop_dclm_tutorial_subset,
        data_filter_prompt=FINEMATH_DATA_FILTER_PROMPT,
        dataset_output_processor_config_kwargs={"processor_type": "finalscore0-5"},
    )
)

if __name__ == "__main__":
    datashop_runner.run_eval_cluster_steps()
