"""How often the loop looks for a stop (`opt_train.training.cadence`): 10 updates, longer on fast models, the same on every worker."""

from opt_train.training.cadence import STOP_CHECK_EVERY, STOP_CHECK_MOST, STOP_CHECK_SECONDS, StopCadence


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _paced(cadence, clock, seconds_per_update, step):
    """Trains to `step` at a pace, then looks."""
    clock.now += seconds_per_update * (step - cadence.last_step)
    cadence.last_step = step
    cadence.looked(step)
    return cadence.every


def _cadence(**kwargs):
    clock = Clock()
    cadence = StopCadence(clock=clock, **kwargs)
    cadence.last_step = 0
    return cadence, clock


def test_a_fast_model_in_one_process_is_looked_at_about_once_a_second():
    cadence, clock = _cadence()
    assert cadence.every == STOP_CHECK_EVERY
    # The first look only starts the measure (the first stretch traces and compiles).
    assert _paced(cadence, clock, 5.0, 10) == 10
    assert _paced(cadence, clock, 0.0006, 20) == STOP_CHECK_MOST  # 1000 x 0.6 ms <= 1 s
    assert _paced(cadence, clock, 0.002, 1000) == 100  # 1000 x 2 ms > 1 s >= 100 x 2 ms
    assert _paced(cadence, clock, 0.5, 1100) == 10  # a slow model keeps the shortest interval
    assert STOP_CHECK_SECONDS == 1.0


def test_time_not_spent_training_does_not_slow_the_pace():
    cadence, clock = _cadence()
    _paced(cadence, clock, 0.0, 10)
    clock.now += 30.0  # an evaluation and a checkpoint
    cadence.paused(30.0)
    assert _paced(cadence, clock, 0.0006, 20) == STOP_CHECK_MOST


def test_workers_take_the_least_interval_any_of_them_picked():
    proposals = []

    def agree(every):  # the collective: this worker's proposal against another's 100
        proposals.append(every)
        return min(every, 100)

    worker, clock = _cadence(agree=agree)
    _paced(worker, clock, 5.0, 10)
    assert proposals == []  # the first look only starts the measure, on every worker alike
    assert _paced(worker, clock, 0.0006, 20) == 100  # its own pace would give 1000
    assert proposals == [STOP_CHECK_MOST]


def test_the_stop_policy_looks_at_every_update():
    every_update, clock = _cadence(every_update=True)  # on_nonfinite: stop
    _paced(every_update, clock, 0.0, 1)
    assert _paced(every_update, clock, 0.0001, 2) == 1
