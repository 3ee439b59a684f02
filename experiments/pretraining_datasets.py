"""Marin's registry of raw pretraining corpora (its experiments/pretraining_datasets.py), as download steps.

Each name is a `raw/...` download step of a Hugging Face dataset repository at the commit Marin
pinned, limited to its Parquet files with a `text` column (what our tokenizer reads), so a Marin file's
`default_tokenize(name, dataset=fineweb_edu, tokenizer=...)` plans and runs here as it did there.
Nothing is fetched when a plan is made; the step downloads when it runs (docs/data.md).

Marin reached some of these through folders of its own bucket (`override_output_path` onto an
earlier transfer, `.cd(<revision>/...)`); here each is a fresh download into the step's `data/`
folder. Not here: corpora whose documents our reader cannot take as they are published (JSON
lines without an `id`: SlimPajama-627B, DCLM-Baseline, Proof-Pile-2; code in a `content` column:
StarCoderData) and corpora that are not one Hugging Face repository (Nemotron-CC's crawl files,
Dolma's URL lists). A file that imports one of those names fails at its import line, naming it.
"""

from __future__ import annotations

from experiments.defaults import default_download

__all__ = ["fineweb", "fineweb_edu", "slimpajama_6b"]

fineweb = default_download(
    "fineweb", hf_dataset="HuggingFaceFW/fineweb", revision="cd85054", include=("data/*/*.parquet",)
)
"""FineWeb, every crawl (the `sample/` subsets repeat its documents and are left out)."""

fineweb_edu = default_download(
    "fineweb-edu", hf_dataset="HuggingFaceFW/fineweb-edu", revision="3c452cb", include=("data/*/*.parquet",)
)
"""FineWeb-Edu, every crawl (without the `sample/` subsets)."""

slimpajama_6b = default_download(
    "SlimPajama-6B", hf_dataset="DKYoon/SlimPajama-6B", revision="b5f90f4", include=("data/*.parquet",)
)
"""A 6B-token sample of SlimPajama."""
