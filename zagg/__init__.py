"""zagg: aggregate point observations onto HEALPix morton cells, lazily, with dask."""

from .aggregate import aggregate
from .config import ConfigError, load_config

__all__ = ["aggregate", "load_config", "ConfigError"]
__version__ = "0.1.0"
