"""execrl: reinforcement learning for code and math language models with verifiable rewards."""

import logging

__version__ = "0.1.0"

# torchao (the low-memory optimizers), where installed, is imported by transformers too, whatever the run uses; at
# import it logs each of its compiled extensions that does not match this torch build, and torch logs deprecations
# of its enum registrations: neither matters to its optimizers, and a user would read them as errors
for _name in ("torchao", "torch.utils._pytree"):
    logging.getLogger(_name).setLevel(logging.ERROR)
