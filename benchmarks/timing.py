"""Interleaved measurement (A B C A B C ...) and the medians and ratios reported from it.

Only figures taken in one process, interleaved, are compared: the machine is shared,
so its speed drifts between repeats, but it drifts for every pipeline alike.
"""

from __future__ import annotations

import statistics


def interleave(measures, repeats):
    """Runs each `measure() -> seconds` once per repeat, rotating the order; returns name -> [seconds, ...].

    One untimed round runs first: a first measurement right after building is
    slower (one-time allocations, caches), and it would be counted for the
    pipelines measured first.
    """
    seconds = {name: [] for name in measures}
    names = list(measures)
    for name in names:
        measures[name]()
    for repeat in range(repeats):
        # Each repeat starts one pipeline later (A B C, B C A, ...): no pipeline always
        # runs right after the same neighbour or first after a pause.
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            seconds[name].append(measures[name]())
    return seconds


def summarize(seconds, steps, samples_per_update):
    """Steady-state figures from the repeats' wall times for `steps` updates each."""
    per_update = [total / steps for total in seconds]
    median = statistics.median(per_update)
    return {
        "steps_per_sec": 1.0 / median,
        "samples_per_sec": samples_per_update / median,
        "ms_per_step": 1000.0 * median,
        # The fastest repeat: the figure least touched by other processes on the machine.
        "best_samples_per_sec": samples_per_update / min(per_update),
        "ms_per_step_repeats": [round(1000.0 * value, 4) for value in per_update],
        # (slowest - fastest) / median: how much the shared machine moved the repeats.
        "spread": (max(per_update) - min(per_update)) / median,
    }


def ratio(numerator, denominator, key="samples_per_sec"):
    """`numerator[key] / denominator[key]`, rounded for the report."""
    return round(numerator[key] / denominator[key], 4)
