"""A sweep plan whose trials run a stand-in trainer script instead of `opt-train train` (tests and their worker scripts)."""

import dataclasses
import sys

from opt_train.sweep.plan import SweepPlan


@dataclasses.dataclass(frozen=True)
class FakePlan(SweepPlan):
    script: str = ""

    def command(self, trial, python=None):
        return [sys.executable, self.script, *super().command(trial)[1:]]


def running(plan, script):
    """`plan` (a checked `SweepPlan`) with each trial run by `script`, given the trial's own arguments."""
    fields = {field.name: getattr(plan, field.name) for field in dataclasses.fields(SweepPlan)}
    return FakePlan(**fields, script=str(script))
