"""marin_lab: an open-lab experiment orchestrator for language-model research."""

__version__ = "0.1.0"
