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

Beside each ratio it prints the ceiling no run of that form can beat here:
update / (update + what the form adds to it), that addition measured alone by
benchmarks/floors.py (2 replicas on one CPU: one more optimizer update and the
gradients' sum; 2 workers: one all-reduce of the gradients between 2 processes).
A missed target under its ceiling is the machine's, not the pipeline's.

`--quick` (the smoke test's) trains 30 updates a contender, one round, and runs the
one-process baseline and the replicas floor in this process rather than in fresh ones,
and starts the workers floor's workers from it: each fresh process costs a TensorFlow
import, and no --quick figure means anything.

On a machine with GPUs, `--replicas 1 2 4 8` prints a scaling table: samples/s at
`num_gpus: N` with `batch_size_per_gpu` fixed, against N x one GPU (the published
anchor: ResNet-50 in TF, 8 A100s at 91.5 % of linear).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import REPO, run_environment

CONFIG = REPO / "configs" / "default.yaml"
TARGETS = {"replicas_2": 0.9, "workers_2": 0.8}
# What each form adds to an update, measured alone by benchmarks/floors.py (its ceiling's cause).
ADDED = {
    "replicas_2": "one more optimizer update and the gradients' sum of {parameters:,} parameters on one CPU",
    "workers_2": "one all-reduce of {parameters:,} parameters between 2 processes",
}


def _train(logdir, *settings, np_=None, timeout=1800, config=CONFIG, in_process=False):
    """One `opt-train train --benchmark` process (or `--np` workers) of `config`; its final metrics.

    `in_process` (one process only): the same command run in this process (`--quick`).
    """
    argv = [sys.executable, "-m", "opt_train", "train", "--config", str(config), "--benchmark",
            "--set", f"logdir={logdir}", *[arg for s in settings for arg in ("--set", s)]]
    if np_:
        argv += ["--np", str(np_)]
    if in_process and not np_:
        _train_here(argv[3:])
        return json.loads((Path(logdir) / "final_metrics.json").read_text())
    job = subprocess.run(argv, cwd=REPO, env=run_environment(), capture_output=True, text=True, timeout=timeout)
    if job.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({job.returncode}):\n{(job.stdout + job.stderr)[-3000:]}")
    return json.loads((Path(logdir) / "final_metrics.json").read_text())


def _train_here(args):
    """`opt-train <args>` in this process (`benchmarks.opt_train_here`); raises if it failed."""
    from benchmarks import opt_train_here

    code, output = opt_train_here(args)
    if code:
        raise RuntimeError(f"opt-train {' '.join(args)} failed ({code}):\n{output[-3000:]}")


def contenders(batch, replicas=(2,), workers=(2,)):
    """name -> (settings, --np): the baseline at the global batch, and each distributed form of it."""
    found = {}
    for count in replicas:
        found[f"replicas_{count}"] = ([f"num_gpus={count}", f"batch_size_per_gpu={batch // count}"], None)
    for count in workers:
        found[f"workers_{count}"] = ([f"batch_size_per_gpu={batch // count}"], count)
    return found


def measure(rounds, steps, batch, replicas=(2,), workers=(2,), settings=(), config=CONFIG, in_process=False):
    """({name: [samples/s per round]} with the one-process baseline under "baseline", [baseline ms per update]).

    `in_process`: the baseline runs in this process (`--quick`), the others still in their own.
    """
    common = list(settings)
    races = {"baseline": ([f"batch_size_per_gpu={batch}"], None), **contenders(batch, replicas, workers)}
    figures = {name: [] for name in races}
    update_ms = []
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(rounds):
            for name, (settings, np_) in races.items():
                logdir = Path(scratch) / f"{name}-{number}"
                final = _train(logdir, f"max_steps={steps}", *common, *settings, np_=np_, config=config,
                               in_process=in_process and name == "baseline")
                figures[name].append(final["benchmark/samples_per_sec"])
                if name == "baseline":
                    update_ms.append(final["benchmark/time_per_step"] * 1e3)
    return figures, update_ms


def floors(batch, settings=(), config=CONFIG, in_process=False):
    """{name: what 2 replicas / 2 workers add to an update, measured alone} (benchmarks/floors.py).

    `in_process` (`--quick`): the replicas floor is timed in this process, and the workers
    floor's 2 workers are started from it, not from a `python -m benchmarks.floors` process
    of their own (which imports TensorFlow to start them).
    """
    found = {}
    for name, form in (("replicas_2", "replicas"), ("workers_2", "workers")):
        if in_process:
            from benchmarks import floors as measured

            found[name] = getattr(measured, form)(str(config), [*settings, f"batch_size_per_gpu={batch}"])
            continue
        argv = [sys.executable, "-m", "benchmarks.floors", form, "--config", str(config),
                *[arg for s in (*settings, f"batch_size_per_gpu={batch}") for arg in ("--set", s)]]
        job = subprocess.run(argv, cwd=REPO, env=run_environment(), capture_output=True, text=True, timeout=1800)
        if job.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({job.returncode}):\n{job.stderr[-3000:]}")
        found[name] = json.loads(job.stdout.strip().splitlines()[-1])
    return found


def ceilings(update_ms, found_floors):
    """{name: the ratio no run can beat here: update / (update + what the form adds)}."""
    update = statistics.median(update_ms)
    return {name: update / (update + floor["added_ms"]) for name, floor in found_floors.items()}


def ratios(figures):
    """{name: median over rounds of contender / baseline in the same round}."""
    base = figures["baseline"]
    return {
        name: statistics.median(value / reference for value, reference in zip(values, base))
        for name, values in figures.items() if name != "baseline"
    }


def report(figures, found, update_ms=(), found_floors=None, found_ceilings=None):
    lines = [f"baseline (1 process): {statistics.median(figures['baseline']):.0f} samples/s"
             + (f", {statistics.median(update_ms):.2f} ms an update" if update_ms else "")]
    for name, ratio in found.items():
        target = TARGETS.get(name)
        verdict = "" if target is None else f" (target >= {target}: {'met' if ratio >= target else 'missed'})"
        line = f"{name}: {statistics.median(figures[name]):.0f} samples/s, ratio {ratio:.3f}{verdict}"
        if found_ceilings and name in found_ceilings:
            added = found_floors[name]["added_ms"]
            what = ADDED[name].format(parameters=found_floors[name]["parameters"])
            line += f"; ceiling here {found_ceilings[name]:.2f} ({what}: {added:.2f} ms)"
        lines.append(line)
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
    parser.add_argument("--no-floors", dest="floors", action="store_false",
                        help="skip the ceilings (2 replicas on one CPU, 2 workers on one machine; off for GPUs)")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps = 1, 30
    figures, update_ms = measure(args.rounds, args.steps, args.batch, args.replicas, args.workers, args.settings,
                                 args.config, in_process=args.quick)
    found = ratios(figures)
    found_floors = floors(args.batch, args.settings, args.config, in_process=args.quick) if args.floors else {}
    found_ceilings = ceilings(update_ms, found_floors) if found_floors else {}
    print(report(figures, found, update_ms, found_floors, found_ceilings))
    results = {"figures": figures, "ratios": found, "targets": TARGETS, "quick": args.quick,
               "rounds": args.rounds, "steps": args.steps, "global_batch": args.batch, "config": args.config,
               "settings": args.settings, "baseline_update_ms": update_ms, "floors": found_floors,
               "ceilings": found_ceilings}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
