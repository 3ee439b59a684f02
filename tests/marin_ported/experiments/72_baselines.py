# Ported from Marin (https://github.com/marin-community/marin): experiments/72_baselines.py, commit
# 03ae43eaab97b27e6b1535be498b09fea57d54f4. Test data for
# tests/marin_ported/test_ray_era_experiments.py; only import lines were changed:
# `marin.execution.executor` -> `marin_lab.execution`; the rest is Marin's text (our linter may re-
# sort an import block). Copyright The Marin Authors, licensed under the Apache License, Version 2.0
# (https://www.apache.org/licenses/LICENSE-2.0), distributed on an "AS IS" BASIS, WITHOUT WARRANTIES
# OR CONDITIONS OF ANY KIND. See docs/coming_from_marin.md.
"""
Train 1.4B models on standard datasets.
https://github.com/stanford-crfm/marin/issues/72
"""

from experiments.defaults import default_tokenize, default_train, llama3_tokenizer, llama_1_4b
from marin_lab.execution import ExecutorStep, executor_main, output_path_of, this_output_path, versioned
from operations.download.huggingface.download import DownloadConfig, download

############################################################
# Download

download_fineweb = ExecutorStep(
    name="raw/fineweb",
    fn=download,
    config=DownloadConfig(
        hf_dataset_id="HuggingFaceFW/fineweb",
        revision="cd85054",
        gcs_output_path=this_output_path(),
        wait_for_completion=True,
    ),
    override_output_path="gs://marin-us-central2/raw/fineweb",
)

download_fineweb_edu = ExecutorStep(
    name="raw/fineweb-edu",
    fn=download,
    config=DownloadConfig(
        hf_dataset_id="HuggingFaceFW/fineweb-edu",
        revision="3c452cb",
        gcs_output_path=this_output_path(),
        wait_for_completion=True,
    ),
)
fineweb_edu_raw = output_path_of(download_fineweb_edu)

download_slimpajama = ExecutorStep(
    name="raw/SlimPajama-627B",
    fn=download,
    config=DownloadConfig(
        hf_dataset_id=versioned("cerebras/SlimPajama-627B"),
        revision=versioned("2d0accd"),
        gcs_output_path=this_output_path(),
        wait_for_completion=True,
    ),
)
slimpajama_raw = output_path_of(
    download_slimpajama, "2d0accd/huggingface.co/datasets/cerebras/SlimPajama-627B/resolve/2d0accd"
)

download_dolma = ExecutorStep(
    name="raw/dolma",
    fn=download,
    config=DownloadConfig(
        hf_dataset_id=versioned("allenai/dolma"),
        revision=versioned("7f48140"),
        gcs_output_path=this_output_path(),
        wait_for_completion=True,
    ),
    override_output_path="gs://marin-us-central2/raw/dolma",
)

download_dclm_baseline = ExecutorStep(
    name="raw/dclm-baseline-1.0",
    fn=download,
    config=DownloadConfig(
        hf_dataset_id=versioned("mlfoundations/dclm-baseline-1.0"),
        revision=versioned("a3b142c"),
        gcs_output_path=this_output_path(),
        wait_for_completion=True,
    ),
    override_output_path="gs://marin-us-central2/raw/dclm",
)

############################################################
# Train models

slimpajama_tokenized = default_tokenize(name="SlimPajama-627B", dataset=slimpajama_raw, tokenizer=llama3_tokenizer)
slimpajama_model = default_train(name="SlimPajama-627B-1.4b", tokenized=slimpajama_tokenized, model=llama_1_4b)

fineweb_edu_tokenized = default_tokenize(name="fineweb-edu", dataset=fineweb_edu_raw, tokenizer=llama3_tokenizer)
fineweb_edu_model = default_train(name="fineweb-edu-1.4b", tokenized=fineweb_edu_tokenized, model=llama_1_4b)

############################################################

if __name__ == "__main__":
    executor_main(
        steps=[
            #download_slimpajama,
            #download_fineweb_edu,
            slimpajama_tokenized,
        ]
    )
