"""What `deterministic: true` costs: the training loop with and without op determinism, interleaved in one process.

    python -m benchmarks.determinism     # writes benchmarks/results/<date>-determinism.json
    python -m benchmarks.determinism --quick          # tiny sizes: checks the harness only

Op determinism is a process-wide switch. The harness builds the plain loop with it
off and the deterministic loop (`deterministic: true`, the config key) with it on,
then alternates their timed windows, turning the switch to match each one (TensorFlow's
own `disable_op_determinism`, which `opt-train` never calls), so both see the same load.
Figures: samples/s medians over the rounds and their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile

from benchmarks import results_path
from benchmarks.pipelines import BatchSource, OptTrainPipeline
from benchmarks.scenarios import load, scenarios, set_flags


def _switch(on):
    from tensorflow.python.framework import config as tf_config

    if on:
        tf_config.enable_op_determinism()
    else:
        tf_config.disable_op_determinism()


def measure(scenario, workdir):
    """`{plain, deterministic, ratio}` samples/s medians of the loop on `scenario`, windows alternated."""
    pipelines = {}
    for name, extra in (("plain", ()), ("deterministic", ("deterministic=true",))):
        config = load(scenario, f"{workdir}/{scenario.name}-{name}", extra)
        _switch(config.deterministic)
        from opt_train.training.builder import build_data_for
        from opt_train.distributed import get_backend

        data = build_data_for(config, get_backend())
        pipelines[name] = OptTrainPipeline(config, BatchSource(data.train, 16))
    times = {name: [] for name in pipelines}
    for round_number in range(scenario.repeats):
        order = list(pipelines) if round_number % 2 == 0 else list(reversed(pipelines))
        for name in order:
            _switch(name == "deterministic")
            times[name].append(pipelines[name].measure(scenario.warmup, scenario.steps))
    for pipeline in pipelines.values():
        pipeline.close()
    _switch(False)
    samples = scenario.batch_size * scenario.steps
    figures = {name: samples / statistics.median(values) for name, values in times.items()}
    return {
        "command": f"opt-train train --config configs/default.yaml {set_flags(scenario, ('deterministic=true',))}",
        "samples_per_sec": figures,
        "deterministic_over_plain": figures["deterministic"] / figures["plain"],
        "seconds": {name: [round(t, 4) for t in values] for name, values in times.items()},
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the figures as JSON here (default: benchmarks/results/<date>-determinism.json)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the harness, figures mean nothing")
    args = parser.parse_args(argv)
    chosen = scenarios(args.quick)
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for name in ("default", "large_mlp"):
            results[name] = measure(chosen[name], workdir)
            print(f"{name}: deterministic / plain = {results[name]['deterministic_over_plain']:.3f} "
                  f"({results[name]['samples_per_sec']['deterministic']:.0f} vs "
                  f"{results[name]['samples_per_sec']['plain']:.0f} samples/s)", flush=True)
    with open(args.out or results_path.dated("determinism", quick=args.quick), "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
    return results


if __name__ == "__main__":
    main()
