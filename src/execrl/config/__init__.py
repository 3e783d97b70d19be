"""Configuration: the typed schema (schema.py), YAML loading (load.py), batch arithmetic
(batch.py)."""

from execrl.config.batch import BatchPlan, plan
from execrl.config.load import ConfigError, load_config, to_yaml, validate
from execrl.config.schema import MasterConfig

__all__ = ["BatchPlan", "ConfigError", "MasterConfig", "load_config", "plan", "to_yaml", "validate"]
