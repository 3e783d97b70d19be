"""execrl: reinforcement learning for code and math language models with verifiable rewards."""

__version__ = "0.1.0"
