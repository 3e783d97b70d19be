"""The base of every config section: unknown keys are errors, assignments are validated."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=())  # (model_name: pydantic
    # before 2.10 warned of its "model_" namespace on every command)
