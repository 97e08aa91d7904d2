"""Why a run ends before `max_steps`, asked in one place: a stop policy, a signal, a sweep's pruner, early stopping.

`Stops.check(step, looks)` asks the `looks` named, in their order, and acts on the first
that says stop:
- `POLICY`: the train op's stop policy fired (`on_nonfinite: stop`): recorded as
  `{"stopped": reason}`, then `TrainingFailed`; nothing is saved;
- `DIVERGED`: an update made a weight or the optimizer's state non-finite (no policy can undo
  that): a `POLICY` stop, asked before anything is reported, evaluated or saved;
- `SIGNALLED`: SIGINT/SIGTERM reached a rank: a checkpoint (none under --benchmark), the
  record `{"interrupted": name}`, then `Interrupted` (exit 128 + the signal), so the same
  command resumes exactly;
- `PRUNED`: the sweep's pruner stopped the trial after an evaluation
  (opt_train/training/pruning.py): a checkpoint, `{"pruned": metric}`, then `Pruned` (exit 3);
- `EARLY`: early stopping ended the run (opt_train/training/controls.py): `max_steps` becomes
  this step, and the run ends as one that reached it (saved, evaluated, exported).
A signal and the pruner are one all-reduce each, asked by every rank at the same steps, so
every rank stops at the same update.
"""

from __future__ import annotations

import signal
from typing import NamedTuple

from opt_train.training.errors import Interrupted, Pruned, TrainingFailed, listed
from opt_train.training.pruning import trial_link

# A stop's kind is also the key of its metrics.jsonl record.
POLICY = "stopped"
SIGNALLED = "interrupted"
PRUNED = "pruned"
EARLY = "early_stopping"
# A look without a record of its own: what it finds is a POLICY stop.
DIVERGED = "diverged"


class Stop(NamedTuple):
    """A reason to end the run: its `kind`, the `step` it names, what stopped it (`reason`) and the signal's number."""

    kind: str
    step: int
    reason: str = ""
    signal_number: int = 0


class Stops:
    """The run's stops: `why(step, looks)` asks, `check(step, looks)` asks and acts.

    Args:
        run: the built run (its train op, backend, controls' state through `controls`).
        controls: the run's `Controls` (early stopping's state).
        outputs: the run's `Outputs` (the stop's record, the figures the pruner judges).
        save: saves a checkpoint at this step (every rank calls it).
        stop_requests: the `StopRequests` that caught a signal, or None (no signal is looked for).
        benchmark: a --benchmark run (a signal saves no checkpoint).
    """

    def __init__(self, run, controls, outputs, save, stop_requests=None, benchmark=False):
        self.run = run
        self.chief = run.backend.is_chief
        self.controls = controls
        self.outputs = outputs
        self.save = save
        self.stop_requests = stop_requests
        self.benchmark = benchmark
        # Set when a sweep with a pruner runs this trial (opt_train/training/pruning.py, opt_train/trial.py).
        self.trial_link = trial_link()

    def check(self, step, looks, at=None):
        """Acts on `why(step, looks, at)`: raises for a policy, a signal or the pruner; returns early stopping's Stop."""
        stop = self.why(step, looks, at)
        if stop is None:
            return None
        if stop.kind == EARLY:
            self.run.max_steps = stop.step  # ends the loop here, as if max_steps were this step
            return stop
        if stop.kind in (SIGNALLED, PRUNED):
            if stop.kind == PRUNED or not self.benchmark:
                self.save()
            # No rank exits (and has the launcher stop the others) before rank 0 has saved.
            self.run.backend.leave()
        if self.chief:
            self.outputs.record({"step": stop.step, stop.kind: stop.reason})
        raise self._error(stop)

    def why(self, step, looks, at=None):
        """The first of `looks` that says stop at `step`, or None (`at`: the step a policy's stop names).

        Every rank asks the same `looks` at the same steps: a signal and the pruner are collectives.
        """
        asks = {POLICY: lambda: self._policy(at if at is not None else step), SIGNALLED: lambda: self._signal(step),
                PRUNED: lambda: self._pruned(step), EARLY: lambda: self._early(step),
                DIVERGED: lambda: self._diverged(step)}
        for look in looks:
            stop = asks[look]()
            if stop is not None:
                return stop
        return None

    def _policy(self, step):
        reason = self.run.train_op.stop_reason
        return Stop(POLICY, step, reason) if reason else None

    def _diverged(self, step):
        """The variables an update left non-finite: the same on every rank (their values are), so no collective."""
        named = listed(self.run.train_op.nonfinite_variables())
        if not named:
            return None
        return Stop(POLICY, step, f"an update left {named} not finite, from finite gradients (the "
                                  "optimizer's update rule overflowed or divided by zero)")

    def refuse_nonfinite_start(self, loaded):
        """`TrainingFailed` when the weights or optimizer state read from `loaded` (a checkpoint's path,
        `init_from`, `load_model`) are not finite: no update could mend them."""
        named = listed(self.run.train_op.nonfinite_variables())
        if named:
            raise TrainingFailed(f"{loaded} holds {named} not finite: the run cannot start from it")

    def _signal(self, step):
        """SIGINT/SIGTERM received by any rank (the same answer on every rank), before `max_steps`."""
        number = self.stop_requests.signal_number if self.stop_requests else 0
        if self.run.backend.size > 1:
            # Ranks get the signal at different moments; stopping at different updates would
            # leave the others waiting in an all-reduce forever.
            number = self.run.backend.allreduce_scalar(number, op="max")
        if number and step < self.run.max_steps:
            return Stop(SIGNALLED, step, signal.Signals(number).name, number)
        return None

    def _pruned(self, step):
        """Asks the sweep's pruner after an evaluation (rank 0 evaluates; every rank hears its answer)."""
        if self.trial_link is None or step >= self.run.max_steps:
            return None
        figures = {f"eval/{k}": v for k, v in self.outputs.eval_results.items()}
        figures["train/loss"] = self.outputs.last_figures.get("loss")
        pruned = int(self.chief and self.trial_link.should_stop(step, figures))
        if self.run.backend.size > 1:
            pruned = self.run.backend.allreduce_scalar(pruned, op="max")  # only rank 0 evaluates
        return Stop(PRUNED, step, self.trial_link.metric) if pruned else None

    def _early(self, step):
        return Stop(EARLY, step) if self.controls.stopped() else None

    def _error(self, stop):
        if stop.kind == POLICY:
            return TrainingFailed(f"stopped at step {stop.step}: {stop.reason}")
        if stop.kind == PRUNED:
            return Pruned(f"pruned at step {stop.step}: {stop.reason} is behind the other trials")
        saved = "no checkpoint (--benchmark)" if self.benchmark else "checkpoint saved; run the same command to resume"
        who = "" if self.chief else f"{self.outputs.worker_name()}: "
        return Interrupted(f"{who}interrupted by {stop.reason} at step {stop.step}: {saved}", stop.signal_number)
