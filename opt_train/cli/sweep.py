"""`opt-train sweep`: run one config many times, trials handed out by an Optuna study, and rank the results."""

import os

import click

from opt_train.cli.common import ConfigUsageError, Count, TrainingFailedError, config_options, load, user_errors
from opt_train.config.sweep_block import HEARTBEAT_SECONDS, MAX_TRIAL_RETRIES, worker_settings


@click.command()
@config_options(required=False)
@click.option(
    "--grid",
    "grids",
    multiple=True,
    metavar="KEY=V1,V2,...",
    help="Values to try for one key, read as YAML (lists in brackets), e.g. optimizer=Adam,Momentum (repeatable).",
)
@click.option("--trials", "--random", "random_trials", type=int, metavar="N",
              help="Sample N trials (per grid point) from the config's sweep.random ranges.")
@click.option("--sampler", type=click.Choice(["grid", "random", "tpe", "cmaes", "qmc"]),
              help="Optuna sampler (default: sweep.sampler, else tpe with ranges, grid without).")
@click.option("--pruner", type=click.Choice(["none", "median", "asha", "hyperband"]),
              help="Optuna pruner, stopping losing trials at an evaluation (default: sweep.pruner, else none).")
@click.option("--storage", metavar="URL",
              help="The study's database, e.g. postgresql://host/db (default: sweep.storage, else DIR/study.db).")
@click.option("--study", metavar="NAME", help="The study's name (default: sweep.study, else DIR's name).")
@click.option("--seed", type=int, metavar="S", help="Seed of the sampler (default: sweep.seed, else 0).")
@click.option("--repeats", type=int, metavar="R", help="Run each grid point R times with random_seed = seed, seed+1, ...")
@click.option("--parallel", "-p", type=click.IntRange(min=1), default=1, show_default=True,
              help="Trials this worker runs at once; the CPU cores are shared between them.")
@click.option("--np", "np_", type=click.IntRange(min=1), default=1, show_default=True,
              help="Run every trial as N workers (`opt-train train --np N`: tf.distribute, or Horovod "
              "with distributed: horovod).")
@click.option("--gpus", metavar="0,1,...",
              help="GPUs this worker gives its trials, each running trial a block of its own through "
              "CUDA_VISIBLE_DEVICES (default: sweep.gpus, else CUDA_VISIBLE_DEVICES, else what nvidia-smi -L "
              "lists, else none).")
@click.option("--heartbeat-secs", type=Count(1), metavar="N",
              help="Seconds between this worker's heartbeats for its trials; a trial without one for twice that "
              f"is queued again and resumed from its checkpoint by a worker sharing --out (default: "
              f"sweep.heartbeat_secs, else {HEARTBEAT_SECONDS}).")
@click.option("--max-trial-retries", type=Count(0), metavar="N",
              help="Times a trial whose worker stopped sending heartbeats is queued again before it fails "
              f"(default: sweep.max_trial_retries, else {MAX_TRIAL_RETRIES}).")
@click.option("--metric", help="Metric that ranks the trials (default: sweep.metric, else eval/loss).")
@click.option("--mode", type=click.Choice(["min", "max"]), help="Whether smaller or larger --metric is better.")
@click.option("--out", type=click.Path(file_okay=False), help="Sweep folder (default: <logdir>-sweep).")
@click.option("--dry-run", is_flag=True, help="List the trials a fresh study would run, and their state; run nothing.")
@click.option("--print-commands", is_flag=True, help="Print one shell command per trial; run nothing.")
@click.option("--status", is_flag=True,
              help="Print the study's table, best trial and states from the sweep folder (--out, else the "
              "current folder); run nothing.")
@click.option("--retry-failed", is_flag=True, help="Run failed trials again instead of skipping them.")
@click.option("--launcher", type=click.Choice(["local", "slurm"]), default="local", show_default=True,
              help="Where trials run: processes of this machine, or the tasks of a SLURM array job (sbatch).")
@click.option("--sbatch-args", metavar="ARGS", default="",
              help='Extra sbatch options for --launcher slurm, e.g. "--partition gpu --gres=gpu:1 --time 2:00:00".')
def sweep(configs, overrides, grids, random_trials, sampler, pruner, storage, study, seed, repeats, parallel, np_,
          gpus, heartbeat_secs, max_trial_retries, metric, mode, out, dry_run, print_commands, status, retry_failed,
          launcher, sbatch_args):
    """Run a config once per trial (each its own `opt-train train` process) and print a ranked table.

    \b
    opt-train sweep -c configs/default.yaml --out runs/lr-sweep \\
        --grid optimizer_params.learning_rate=0.1,0.01,0.001 --grid optimizer=Adam,Momentum \\
        --metric eval/accuracy --mode max --parallel 2

    The trials are held by an Optuna study (default: an SQLite file in --out). Every
    process started with the same --storage and --study is a worker of that study.
    Re-running the same command skips finished trials and resumes unfinished ones.
    Exit codes: 0 the sweep ran (failed trials are recorded), 1 every trial failed,
    2 bad usage or config.
    """
    from opt_train.sweep import SweepOptions, dry_run_lines, plan_sweep, preview_trials, run_sweep
    from opt_train.sweep.devices import find_gpus

    if status:
        _status(configs, overrides, out, storage, study)
        return
    if not configs:
        raise click.UsageError("Missing option '--config' / '-c' (only --status can do without it).")
    if sbatch_args and launcher != "slurm":
        raise ConfigUsageError("--sbatch-args: only with --launcher slurm")
    base = load(configs, overrides)
    given_gpus, heartbeat_secs, max_trial_retries = worker_settings(base.sweep, gpus, heartbeat_secs,
                                                                    max_trial_retries)
    if given_gpus is not None and launcher == "slurm":
        raise ConfigUsageError(f"{given_gpus[1]}: only with --launcher local; SLURM gives each task its GPUs "
                               '(--sbatch-args "--gres=gpu:N")')
    options = SweepOptions(grids, random_trials, seed, repeats, metric, mode, sampler, pruner, storage, study)
    with user_errors():
        plan = plan_sweep(configs, overrides, base, options, out, np=np_)
        # SLURM gives each array task its GPUs; this machine's are the local launcher's to hand out.
        if given_gpus is not None:
            found = find_gpus(given_gpus[0], where=given_gpus[1])
        else:
            found = find_gpus() if launcher == "local" else ((), None)
        if dry_run:
            click.echo("\n".join(dry_run_lines(plan)))
            return
        if print_commands:
            click.echo("\n".join(plan.shell_command(trial) for trial in preview_trials(plan)))
            return
        result = run_sweep(plan, parallel, retry_failed=retry_failed, report=_progress, gpus=found,
                           heartbeat_secs=heartbeat_secs, max_trial_retries=max_trial_retries,
                           launcher=_launcher(launcher, sbatch_args, plan))
    click.echo(result.table)
    click.echo(result.summary)
    if result.importances:
        click.echo(_importances_line(result.importances))
    if result.all_failed:
        raise TrainingFailedError(f"every trial failed; reasons in {plan.out}/results.jsonl")


def _launcher(name, sbatch_args, plan):
    """None for trials run here; a `SlurmLauncher` for `--launcher slurm`, or exit 2 where SLURM cannot be used."""
    if name == "local":
        return None
    import shlex

    from opt_train.sweep.slurm import SlurmLauncher, missing_commands

    missing = missing_commands()
    if missing:
        raise ConfigUsageError(f"--launcher slurm: {', '.join(missing)} not found on PATH (run the sweep where SLURM's "
                               "commands are, e.g. a login node)")
    try:
        extra = shlex.split(sbatch_args)
    except ValueError as error:
        raise ConfigUsageError(f"--sbatch-args: {error}. Received: {sbatch_args}") from None
    return SlurmLauncher(plan.out, extra, name=f"opt-train-{os.path.basename(os.path.normpath(plan.out))}")


def _status(configs, overrides, out, storage, study):
    """`--status`: the table the study recorded, found from the sweep folder (`--out`, else the current
    folder) or `--storage` and `--study`; with `--config`, its `<logdir>-sweep` and `sweep` block find them.

    The same table whichever way it is found: the trials of the base config the sweep last
    ran are current, whatever the `--grid`/`--set` given now.
    """
    from opt_train.sweep.collect import recorded_status
    from opt_train.sweep.planning import default_out

    if configs:
        base = load(configs, overrides)
        block = base.sweep or {}
        out = out or default_out(base)
        storage, study = storage or block.get("storage"), study or block.get("study")
    elif out is None and storage is None:
        out = "."  # run inside the sweep's folder
    if out is None and study is None:
        raise ConfigUsageError("--status with --storage needs --study NAME (or the sweep's --out DIR)")
    with user_errors():
        found = recorded_status(out, storage, study)
    if found is None:
        if configs:
            click.echo(f"no study yet for {out} (run the sweep to create it)")
            return
        raise ConfigUsageError(f"no study in {os.path.abspath(out) if storage is None else storage}"
                               + (f" named {study}" if study else "")
                               + ": give the sweep's --out (or --storage and --study), or run inside its folder")
    result, best, metric = found
    click.echo(result.table)
    click.echo(result.summary)
    if best is not None:
        click.echo(f"best: {best['trial']} {metric} {best['metrics'][metric]:.4g} "
                   + " ".join(f"{k}={v}" for k, v in best["overrides"].items()))
    if result.importances:
        click.echo(_importances_line(result.importances))


def _importances_line(importances):
    return "parameter importances: " + ", ".join(f"{key} {value:.2f}" for key, value in importances.items())


def _progress(text):
    """Progress lines go to stderr, so stdout holds only the table."""
    click.echo(text, err=True)
