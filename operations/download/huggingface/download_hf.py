"""Marin's `operations.download.huggingface.download_hf`: `DownloadConfig` and `download_hf`.

A Marin file's download step reads as it did:

    wikitext = ExecutorStep(name="raw/dlwh/wikitext_2_detokenized", fn=download_hf,
                            config=DownloadConfig(hf_dataset_id="dlwh/wikitext_2_detokenized", revision="87a6c77"))

`download_hf` runs marin_lab's download (marin_lab.processing.download) on the dataset repository
at that revision: files land under the step's `data/` folder with a checksum each and a
`provenance.json`, so `default_tokenize(dataset=<this step>)` reads them. The identity is the
repository, the revision and the file globs; where the files are written and how long to wait are
not part of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from marin_lab.execution import THIS_OUTPUT_PATH
from marin_lab.processing.download import DownloadConfig as _LabDownloadConfig
from marin_lab.processing.download import download
from marin_lab.versioning import versioned_field

__all__ = ["DownloadConfig", "download_hf", "lab_download_config"]


@dataclass(frozen=True)
class DownloadConfig:
    """Marin's download config, field names as in Marin."""

    hf_dataset_id: str = versioned_field()
    """The Hugging Face dataset repository ('org/name')."""
    revision: str = versioned_field()
    """The commit (full or short sha) or tag to fetch."""
    gcs_output_path: str = THIS_OUTPUT_PATH
    """Where the step writes (the step's own output unless given); files go under its `data/`."""
    hf_urls_glob: list[str] = versioned_field(default_factory=list)
    """Globs over the repository's file paths to fetch; empty: every file."""
    hf_url_glob: str | None = versioned_field(None)
    """Marin's older single-glob spelling; joined with `hf_urls_glob`."""
    wait_for_completion: bool = True
    """Accepted for Marin's files: the step always returns when its files are in place."""
    timeout: int = 3600
    """Accepted for Marin's files: transient errors are retried with backoff instead (`max_retries`)."""
    max_retries: int = 4
    """Retries per file after a transient error."""


def lab_download_config(config: DownloadConfig) -> _LabDownloadConfig:
    """The marin_lab download config that fetches what `config` names."""
    if not config.hf_dataset_id or not config.revision:
        raise ValueError(
            f"DownloadConfig: hf_dataset_id and revision are both needed (got {config.hf_dataset_id!r}, "
            f"{config.revision!r}); pin the revision to a commit of the dataset repository"
        )
    globs = tuple(config.hf_urls_glob) + ((config.hf_url_glob,) if config.hf_url_glob else ())
    return _LabDownloadConfig(
        output_path=config.gcs_output_path,
        hf_dataset=config.hf_dataset_id,
        revision=config.revision,
        include=globs or None,
        max_retries=config.max_retries,
    )


def download_hf(config: DownloadConfig) -> object:
    """Fetch the dataset repository's files at `config.revision` into `{gcs_output_path}/data/`."""
    return download(lab_download_config(config))
