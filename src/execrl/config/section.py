"""The base of every config section: unknown keys are errors, assignments are validated."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    # (no protected namespaces: pydantic before 2.10 warned of model_name's "model_" on every command)
    # (no inf or NaN in a float: an infinite KL penalty or temperature trained on nothing, exit 0: a hunt's find)
    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=(), allow_inf_nan=False)
