"""Past one device's memory: samples/s of device meshes against one process at the same global batch, and the
bytes of weights + optimizer state each layout leaves per device.

    python -m benchmarks.mesh [--quick] [--rounds 3] [--batch 64] [--meshes 2x2 4x1] [--config X.yaml] [--out FILE]

A mesh `BxM` is `mesh: {batch: B, model: M}` at `batch_size_per_gpu` = global batch / B. With M > 1
every kernel's output dimension is split on `model` (tensor parallel, `'.*kernel': [null, model]`);
with M = 1 every kernel's first dimension is split on `batch` (fully sharded, `'.*kernel': [batch,
null]`). Each contender is `opt-train train --benchmark` of one config (default configs/default.yaml)
as a fresh process (a mesh of logical CPU devices needs one; the baseline too, so all pay the same
start-up), in alternating rounds; its figure is the run's own `benchmark/samples_per_sec`, and each
ratio is the median over rounds of contender / baseline in the same round
(`benchmarks.distributed`'s method and helpers).

The bytes per device are the memory plan `opt-train validate` prints (`opt_train.config.memory`):
weights and optimizer state as laid out, which the DTensor backend's tests hold equal to the shards
it creates. On this 2-core machine the devices are logical CPU devices that share the same cores:
a mesh cannot be faster here, and the ratio says what its collectives and SPMD bookkeeping cost. On
a machine with GPUs the same command prints the table for real devices.

`--quick` (the smoke test's) trains 15 updates a contender, one round, the baseline in this process and
the meshes one after the other in one fresh process (each fresh process costs a TensorFlow import);
no --quick figure means anything.
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
from benchmarks.distributed import CONFIG, _train, ratios

DEFAULT_MESHES = ("2x2", "4x1")


def parse_mesh(text):
    """`"2x2"` -> (batch axis, model axis) sizes, each >= 1."""
    try:
        batch, model = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a mesh is BxM, e.g. 2x2; got {text!r}") from None
    if batch < 1 or model < 1:
        raise argparse.ArgumentTypeError(f"a mesh's axes are >= 1; got {text!r}")
    return batch, model


def mesh_settings(batch, model):
    """The `--set` overrides of mesh `batch`x`model`: its axes and the layout this harness gives it."""
    layout = "[null, model]" if model > 1 else "[batch, null]"
    return [f"mesh={{batch: {batch}, model: {model}}}", f"layouts={{'.*kernel': {layout}}}"]


def contenders(global_batch, meshes):
    """name -> `--set` overrides: the one-process baseline and each mesh, all at `global_batch`."""
    found = {"baseline": [f"batch_size_per_gpu={global_batch}"]}
    for batch, model in meshes:
        if global_batch % batch:
            raise ValueError(f"the global batch {global_batch} does not split on a batch axis of {batch}")
        found[f"mesh_{batch}x{model}"] = [*mesh_settings(batch, model), f"batch_size_per_gpu={global_batch // batch}"]
    return found


def memory(config, settings):
    """{"weights", "optimizer_state", "total"}: bytes per device of the run `config` + `settings` describes."""
    from opt_train.config import load_config
    from opt_train.config.memory import model_variables, plan

    loaded = load_config([str(config)], list(settings))
    variables, why = model_variables(loaded)
    if variables is None:
        return {"unknown": why}
    found = plan(loaded, variables)
    return {"weights": found.weights, "optimizer_state": found.optimizer_state, "total": found.total,
            "line": found.line()}


def measure(rounds, steps, global_batch, meshes, settings=(), config=CONFIG, in_process=False):
    """{name: [samples/s per round]}; `in_process` (`--quick`): the baseline runs in this process, the meshes
    one after the other in one fresh process."""
    races = contenders(global_batch, meshes)
    figures = {name: [] for name in races}
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(rounds):
            runs = {name: (Path(scratch) / f"{name}-{number}", [f"max_steps={steps}", *settings, *own])
                    for name, own in races.items()}
            if in_process:
                logdir, own = runs.pop("baseline")
                finals = {"baseline": _train(logdir, *own, config=config, in_process=True),
                          **_train_in_one_process(runs, config)}
            else:
                finals = {name: _train(logdir, *own, config=config) for name, (logdir, own) in runs.items()}
            for name in races:
                figures[name].append(finals[name]["benchmark/samples_per_sec"])
    return figures


def _train_in_one_process(runs, config):
    """{name: final metrics} of `runs` ({name: (logdir, settings)}): `opt-train train --benchmark` of each in
    turn in one fresh process (a mesh of logical CPU devices needs one; every mesh here fits the first's split)."""
    commands = [["train", "--config", str(config), "--benchmark", "--set", f"logdir={logdir}",
                 *[arg for setting in settings for arg in ("--set", setting)]] for logdir, settings in runs.values()]
    script = "import json, sys\nfrom benchmarks.distributed import _train_here\n" \
             "for args in json.loads(sys.argv[1]):\n    _train_here(args)\n"
    job = subprocess.run([sys.executable, "-c", script, json.dumps(commands)], cwd=REPO, env=run_environment(),
                         capture_output=True, text=True, timeout=1800)
    if job.returncode != 0:
        raise RuntimeError(f"{', '.join(runs)} failed ({job.returncode}):\n{(job.stdout + job.stderr)[-3000:]}")
    return {name: json.loads((Path(logdir) / "final_metrics.json").read_text()) for name, (logdir, _) in runs.items()}


def report(figures, found, memories):
    base = memories["baseline"]
    lines = [f"baseline (1 process): {statistics.median(figures['baseline']):.0f} samples/s; "
             f"{_bytes(base)} per device"]
    for name, ratio in found.items():
        lines.append(f"{name}: {statistics.median(figures[name]):.0f} samples/s, ratio {ratio:.3f}; "
                     f"{_bytes(memories[name])} per device"
                     + (f" ({memories[name]['total'] / base['total']:.2f} of one process's)"
                        if "total" in memories[name] and "total" in base else ""))
    return "\n".join(lines)


def _bytes(memory_figures):
    if "total" not in memory_figures:
        return f"memory unknown until built ({memory_figures['unknown']})"
    return (f"weights + optimizer state {memory_figures['total']:,} B "
            f"(weights {memory_figures['weights']:,} B, optimizer state {memory_figures['optimizer_state']:,} B)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs: checks the harness, figures mean nothing")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300, help="updates per run (the first 10 are warm-up)")
    parser.add_argument("--batch", type=int, default=64, help="the global batch every contender trains on")
    parser.add_argument("--meshes", type=parse_mesh, nargs="*", default=[parse_mesh(m) for m in DEFAULT_MESHES],
                        help="meshes as BxM (batch axis x model axis); default 2x2 4x1")
    parser.add_argument("--config", default=str(CONFIG), help="the run every contender trains (default: configs/default.yaml)")
    parser.add_argument("--set", dest="settings", action="append", default=[],
                        help="a config override for every contender, e.g. model_params.hidden_units=[1024,1024]")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps = 1, 15
    races = contenders(args.batch, args.meshes)
    memories = {name: memory(args.config, [*args.settings, *own]) for name, own in races.items()}
    figures = measure(args.rounds, args.steps, args.batch, args.meshes, args.settings, args.config,
                      in_process=args.quick)
    found = ratios(figures)
    print(report(figures, found, memories))
    results = {"figures": figures, "ratios": found, "memory_per_device": memories, "quick": args.quick,
               "rounds": args.rounds, "steps": args.steps, "global_batch": args.batch, "config": args.config,
               "settings": args.settings, "meshes": [f"{b}x{m}" for b, m in args.meshes]}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
