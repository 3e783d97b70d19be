"""The config error, shared by the loader and the checks."""


class ConfigError(ValueError):
    """A config that cannot be used; the message names the key and the fix."""
