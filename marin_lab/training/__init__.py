"""The JAX language-model trainer: a Llama-family decoder, a stateless data mixture, checkpoints."""

from marin_lab.models.llama import LlamaConfig
from marin_lab.training.checkpoint import CheckpointConfig, CheckpointError
from marin_lab.training.config import TrainLmConfig
from marin_lab.training.data import DataConfig, MixturePhase
from marin_lab.training.errors import TrainingError
from marin_lab.training.mesh import MeshConfig
from marin_lab.training.metrics import WandbConfig
from marin_lab.training.optimizer import OptimizerConfig
from marin_lab.training.token_cache import TokenCacheError, write_token_cache

__all__ = [
    "CheckpointConfig",
    "CheckpointError",
    "DataConfig",
    "LlamaConfig",
    "MeshConfig",
    "MixturePhase",
    "OptimizerConfig",
    "TokenCacheError",
    "TrainLmConfig",
    "TrainingError",
    "WandbConfig",
    "write_token_cache",
]
