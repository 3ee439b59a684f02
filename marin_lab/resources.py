"""Marin's `marin.resources` at the path Marin files import here: see `marin_lab.marin.resources`."""

from marin_lab.marin.resources import CpuOnlyConfig, GpuConfig, TpuPodConfig, step_resources

__all__ = ["CpuOnlyConfig", "GpuConfig", "TpuPodConfig", "step_resources"]
