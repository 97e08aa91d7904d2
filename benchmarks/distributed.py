"""Past one process: samples/s of 2 replicas and of 2 workers against one process at the same global batch.

    python -m benchmarks.distributed [--quick] [--rounds 3] [--config X.yaml] [--out FILE]
    python -m benchmarks.distributed --replicas 1 2 4 8 --workers 1     # a scaling table (GPUs)

Each contender is `opt-train train --benchmark` of one config (`--config`, default
configs/default.yaml; benchmarks/cnn_distributed.yaml is the compute-bound one) as a fresh process
(the baseline too, so every contender pays the same start-up), and its figure is the
run's own `benchmark/samples_per_sec` (timed after the warm-up updates, all replicas'
samples together). The contenders run in alternating rounds, so a machine that slows
down mid-run slows all of them alike; each ratio is the median over rounds of
contender / baseline in the same round. Targets on this 2-core CPU machine: >= 0.9
for 2 replicas (logical CPU devices), >= 0.8 for 2 workers (`--np 2`): what the
all-reduce and the strategy machinery cost on top of the same arithmetic.

On a machine with GPUs, `--replicas 1 2 4 8` prints a scaling table: samples/s at
`num_gpus: N` with `batch_size_per_gpu` fixed, against N x one GPU (the published
anchor: ResNet-50 in TF, 8 A100s at 91.5 % of linear).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "default.yaml"
TARGETS = {"replicas_2": 0.9, "workers_2": 0.8}


def _train(logdir, *settings, np_=None, timeout=1800, config=CONFIG):
    """One `opt-train train --benchmark` process (or `--np` workers) of `config`; its final metrics."""
    argv = [sys.executable, "-m", "opt_train", "train", "--config", str(config), "--benchmark",
            "--set", f"logdir={logdir}", *[arg for s in settings for arg in ("--set", s)]]
    if np_:
        argv += ["--np", str(np_)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    for variable in ("TF_CONFIG", "OPT_TRAIN_LAUNCHED"):
        env.pop(variable, None)
    job = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if job.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({job.returncode}):\n{(job.stdout + job.stderr)[-3000:]}")
    return json.loads((Path(logdir) / "final_metrics.json").read_text())


def contenders(batch, replicas=(2,), workers=(2,)):
    """name -> (settings, --np): the baseline at the global batch, and each distributed form of it."""
    found = {}
    for count in replicas:
        found[f"replicas_{count}"] = ([f"num_gpus={count}", f"batch_size_per_gpu={batch // count}"], None)
    for count in workers:
        found[f"workers_{count}"] = ([f"batch_size_per_gpu={batch // count}"], count)
    return found


def measure(rounds, steps, batch, replicas=(2,), workers=(2,), settings=(), config=CONFIG):
    """{name: [samples/s per round]} with the one-process baseline under "baseline"."""
    common = list(settings)
    races = {"baseline": ([f"batch_size_per_gpu={batch}"], None), **contenders(batch, replicas, workers)}
    figures = {name: [] for name in races}
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(rounds):
            for name, (settings, np_) in races.items():
                logdir = Path(scratch) / f"{name}-{number}"
                final = _train(logdir, f"max_steps={steps}", *common, *settings, np_=np_, config=config)
                figures[name].append(final["benchmark/samples_per_sec"])
    return figures


def ratios(figures):
    """{name: median over rounds of contender / baseline in the same round}."""
    base = figures["baseline"]
    return {
        name: statistics.median(value / reference for value, reference in zip(values, base))
        for name, values in figures.items() if name != "baseline"
    }


def report(figures, found):
    lines = [f"baseline (1 process): {statistics.median(figures['baseline']):.0f} samples/s"]
    for name, ratio in found.items():
        target = TARGETS.get(name)
        verdict = "" if target is None else f" (target >= {target}: {'met' if ratio >= target else 'missed'})"
        lines.append(f"{name}: {statistics.median(figures[name]):.0f} samples/s, ratio {ratio:.3f}{verdict}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs: checks the harness, figures mean nothing")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300, help="updates per run (the first 10 are warm-up)")
    parser.add_argument("--batch", type=int, default=64, help="the global batch every contender trains on")
    parser.add_argument("--replicas", type=int, nargs="*", default=[2])
    parser.add_argument("--workers", type=int, nargs="*", default=[2])
    parser.add_argument("--config", default=str(CONFIG), help="the run every contender trains (default: configs/default.yaml)")
    parser.add_argument("--set", dest="settings", action="append", default=[],
                        help="a config override for every contender, e.g. model_params.hidden_units=[1024,1024]")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps = 1, 30
    figures = measure(args.rounds, args.steps, args.batch, args.replicas, args.workers, args.settings, args.config)
    found = ratios(figures)
    print(report(figures, found))
    results = {"figures": figures, "ratios": found, "targets": TARGETS, "quick": args.quick,
               "rounds": args.rounds, "steps": args.steps, "global_batch": args.batch, "config": args.config,
               "settings": args.settings}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
