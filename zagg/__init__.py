"""zagg: aggregate point observations onto HEALPix morton cells, lazily, with dask."""

from .aggregate import aggregate
from .config import ConfigError, load_config
from .read import open_hive, open_leaf, quantile
from .run import run
from .write import to_hive

__all__ = ["aggregate", "load_config", "ConfigError", "open_hive", "open_leaf", "quantile",
           "run", "to_hive"]
__version__ = "0.1.0"
