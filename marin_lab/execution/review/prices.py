"""The price table: what one accelerator-hour costs, per accelerator type.

Money is never stored in a record: a record holds accelerator-hours (cost.py), and the table in
force turns them into money when they are shown, so a new table reprices every record at once.

The defaults are public on-demand list prices in USD (see `DEFAULT_SOURCES` for each one's page and
region), as Google Cloud listed them in 2025; they were not fetched when this was built and prices
change. A file given with `--prices FILE` (JSON, or TOML when its name ends in `.toml`) overrides
them entry by entry:

    {"currency": "USD", "date": "2026-11-01", "source": "our contract",
     "prices": {"tpu-v5e": 0.84, "gpu-h100": 2.5}}

A table that names an accelerator not in `KNOWN` or holds a negative (or non-numeric) price is
refused in one line naming the file and the entry. A table in another currency than USD prices only
the entries it names (the USD defaults are not mixed in).
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from collections.abc import Mapping
from typing import Any

from marin_lab.execution.errors import PriceTableError
from marin_lab.io.fs import read_bytes

CURRENCY = "USD"
DEFAULT_DATE = "2025"
"""When the default prices were listed (not re-checked since: override them with --prices)."""

# USD per chip-hour (TPU chip, GPU, or vCPU), on demand, no commitment or spot discount.
DEFAULT_PRICES: dict[str, float] = {
    "tpu-v4": 3.22,
    "tpu-v5e": 1.20,
    "tpu-v5p": 4.20,
    "tpu-v6e": 2.70,
    "gpu-h100": 11.06,
    "gpu-a100": 2.93,
    "gpu-a100-80gb": 3.93,
    "gpu-l4": 0.56,
    "gpu-t4": 0.35,
    "gpu-v100": 2.48,
    "cpu": 0.0316,
}

_TPU_PAGE = "cloud.google.com/tpu/pricing"
_GPU_PAGE = "cloud.google.com/compute/gpus-pricing"
DEFAULT_SOURCES: dict[str, str] = {
    "tpu-v4": f"{_TPU_PAGE}, v4 per chip-hour, us-central2",
    "tpu-v5e": f"{_TPU_PAGE}, v5e per chip-hour, us-central1",
    "tpu-v5p": f"{_TPU_PAGE}, v5p per chip-hour, us-east5",
    "tpu-v6e": f"{_TPU_PAGE}, v6e (Trillium) per chip-hour, us-east1",
    "gpu-h100": "cloud.google.com/compute/vm-instance-pricing, a3-highgpu-8g (8 H100 80GB, with its vCPUs and "
    "memory) divided by 8, us-central1",
    "gpu-a100": f"{_GPU_PAGE}, NVIDIA A100 40GB per GPU-hour (the VM's vCPUs and memory extra), us-central1",
    "gpu-a100-80gb": f"{_GPU_PAGE}, NVIDIA A100 80GB per GPU-hour (the VM extra), us-central1",
    "gpu-l4": f"{_GPU_PAGE}, NVIDIA L4 per GPU-hour (the VM extra), us-central1",
    "gpu-t4": f"{_GPU_PAGE}, NVIDIA T4 per GPU-hour (the VM extra), us-central1",
    "gpu-v100": f"{_GPU_PAGE}, NVIDIA V100 per GPU-hour (the VM extra), us-central1",
    "cpu": "cloud.google.com/compute/vm-instance-pricing, N2 per vCPU-hour (memory not counted), us-central1",
}

KNOWN: tuple[str, ...] = (*DEFAULT_PRICES, "gpu")
"""Accelerators a table may price. `gpu` is a GPU step that names no type; it has no default price."""

_TOP_KEYS = ("prices", "currency", "date", "source")


@dataclasses.dataclass(frozen=True)
class PriceTable:
    """Price per accelerator-hour of each accelerator type, and where the prices come from."""

    prices: Mapping[str, float]
    currency: str = CURRENCY
    date: str = DEFAULT_DATE
    source: str = 'default on-demand list prices (docs/executor.md, "Cost")'
    file: str | None = None
    """The --prices file, None for the defaults alone."""

    def price(self, accelerator: str | None) -> float | None:
        return self.prices.get(accelerator) if accelerator else None

    def describe(self) -> str:
        """One line: whose prices, in what currency, from when."""
        if self.file is None:
            return f"prices: {self.source}, {self.currency} per accelerator-hour, listed {self.date}"
        over = " over the default list prices" if self.currency == CURRENCY else ""
        return f"prices: {self.file} ({self.source}, {self.currency} per accelerator-hour, {self.date}){over}"


def default_prices() -> PriceTable:
    return PriceTable(dict(DEFAULT_PRICES))


def load_prices(path: str | None) -> PriceTable:
    """The default table, overridden entry by entry by the file at `path` (JSON, or TOML by name)."""
    if not path:
        return default_prices()
    try:
        raw = read_bytes(path)
    except (OSError, ValueError) as err:
        raise PriceTableError(
            f"{path}: cannot read the price table ({type(err).__name__}: {err}); give a JSON "
            'or TOML file (docs/executor.md, "Cost")'
        ) from None
    data = _parse(path, raw)
    if not isinstance(data, dict):
        raise PriceTableError(
            f"{path}: the price table is {type(data).__name__}, expected an object with a "
            '"prices" table (docs/executor.md, "Cost")'
        )
    for key in data:
        if key not in _TOP_KEYS:
            raise PriceTableError(f"{path}: key {key!r} is not known; a price table has {', '.join(_TOP_KEYS)}")
    entries = data.get("prices")
    if not isinstance(entries, dict):
        raise PriceTableError(
            f'{path}: "prices" is missing or not a table of accelerator -> price per '
            'accelerator-hour (e.g. {"tpu-v5e": 1.2})'
        )
    meta = {k: data[k] for k in ("currency", "date", "source") if k in data}
    for key, value in meta.items():
        if not isinstance(value, str) or not value.strip():
            raise PriceTableError(f"{path}: {key!r} is {value!r}; give it as a non-empty string")
    currency = meta.get("currency", CURRENCY)
    prices = dict(DEFAULT_PRICES) if currency == CURRENCY else {}
    for name, value in entries.items():
        prices[name] = _price(path, name, value, currency)
    return PriceTable(
        prices,
        currency=currency,
        date=meta.get("date", "date not given"),
        source=meta.get("source", "source not given"),
        file=path,
    )


def _parse(path: str, raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise PriceTableError(f"{path}: not UTF-8 at byte {err.start}; give a JSON or TOML price table") from None
    if path.endswith(".toml"):
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise PriceTableError(f"{path}: not valid TOML ({err})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise PriceTableError(
            f"{path}: not valid JSON ({err.msg} at line {err.lineno}); a price table is JSON, or "
            "TOML in a file named *.toml"
        ) from None


def _price(path: str, name: Any, value: Any, currency: str) -> float:
    if name not in KNOWN:
        raise PriceTableError(f"{path}: entry {name!r} is not a known accelerator; known: {', '.join(KNOWN)}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PriceTableError(
            f"{path}: entry {name!r} is {value!r}, not a number; give {currency} per accelerator-hour, 0 or more"
        )
    if value < 0:
        raise PriceTableError(
            f"{path}: entry {name!r} is {value!r}, a negative price; give {currency} per accelerator-hour, 0 or more"
        )
    return float(value)
