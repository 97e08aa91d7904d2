"""`opt-train train`: train the model a config describes."""

import click

from opt_train.cli.common import (
    ConfigUsageError, Count, check_distribution, config_options, import_tensorflow, launch_config, load,
    trial_failure_recorder, user_errors,
)


@click.command()
@config_options
@click.option(
    "--resume",
    "resume_changed",
    is_flag=True,
    help="Continue the run in logdir even though run-defining keys changed (where its checkpoint still fits).",
)
@click.option(
    "--no-resume",
    is_flag=True,
    help="Start afresh; a logdir holding a run is left as it is and the run goes to <logdir>-N.",
)
@click.option(
    "--benchmark",
    is_flag=True,
    help="Report time per step and samples/s after the warm-up steps (summed over ranks); "
    "starts afresh like --no-resume.",
)
@click.option(
    "--np",
    "num_proc",
    type=click.IntRange(min=1),
    default=None,
    help="Run as N workers: tf.distribute workers (one TF_CONFIG each), or Horovod ranks with "
    "distributed: horovod (like `horovodrun -np N --gloo opt-train train`).",
)
@click.option(
    "--hosts",
    default=None,
    metavar="HOST:SLOTS,...",
    help="With --np: where the workers run (default localhost:N); other hosts by password-less ssh.",
)
@click.option(
    "--ssh-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="With --hosts: the port of the other hosts' sshd (default: ssh's own, 22).",
)
@click.option(
    "--ssh-identity-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="With --hosts: the private key ssh logs in to the other hosts with (default: ssh's own).",
)
@click.option(
    "--max-restarts",
    type=Count(0),
    default=0,
    metavar="K",
    help="With --np: when a worker fails, is killed or hangs, stop every worker and relaunch the job from its "
    "newest checkpoint, up to K times (each worker sees OPT_TRAIN_RESTART_COUNT).",
)
@click.option(
    "--profile",
    default=None,
    metavar="START:END",
    help="A TensorBoard profile of updates START..END into logdir/plugins/profile (= profile_steps: [START, END]).",
)
def train(configs, overrides, resume_changed, no_resume, benchmark, num_proc, hosts, ssh_port, ssh_identity_file,
          max_restarts, profile):
    """Train the model a config describes; continues the run in logdir if it is the same run."""
    if profile is not None:
        overrides = (*overrides, _profile_override(profile))
    if resume_changed and (no_resume or benchmark):
        raise ConfigUsageError("--resume cannot be combined with --no-resume or --benchmark")
    if hosts and not num_proc:
        raise ConfigUsageError("--hosts needs --np N")
    if max_restarts and not num_proc:
        raise ConfigUsageError("--max-restarts needs --np N (a job of one process is restarted by running it again)")
    if max_restarts and (no_resume or benchmark):
        raise ConfigUsageError("--max-restarts cannot be combined with --no-resume or --benchmark: "
                               "a restarted job resumes the run it started")
    if (ssh_port or ssh_identity_file) and not hosts:
        raise ConfigUsageError("--ssh-port and --ssh-identity-file need --hosts")
    config = load(configs, overrides)
    if num_proc:
        flags = {"--resume": resume_changed, "--no-resume": no_resume, "--benchmark": benchmark}
        _launch(config, configs, overrides, [flag for flag, given in flags.items() if given], num_proc, hosts,
                (ssh_port, ssh_identity_file), max_restarts)
        return
    # A sweep's trial leaves a failure record the sweep reads (opt_train/trial.py).
    with user_errors(on_failure=trial_failure_recorder(config.logdir)):
        # Inside: Ctrl-C during the (slow) TensorFlow import exits 130 like any other.
        # Before the slow import: a job started wrongly (TF_CONFIG, horovodrun) is refused at once.
        from opt_train.training.launch import check_launch

        check_launch(config)
        import_tensorflow()
        from opt_train.training import train as run_training

        run_training(config, resume=not no_resume, benchmark=benchmark, resume_changed=resume_changed)


def _profile_override(text):
    """`--profile START:END` as the `profile_steps` override (the key's rule checks the numbers)."""
    start, colon, end = text.partition(":")
    if not colon or not start.strip().isdigit() or not end.strip().isdigit():
        raise ConfigUsageError(f"--profile: {text!r} is not START:END (update numbers, e.g. 10:15)")
    return f"profile_steps=[{int(start)}, {int(end)}]"


def _launch(config, configs, overrides, flags, num_proc, hosts, ssh, max_restarts=0):
    """`--np N`: the config checked here once, then N workers of this same command (without --np).

    The backend is the config's `distributed`; with none, tf workers, told so by
    `--set distributed=tf` on their command line.
    """
    import os
    import sys

    from opt_train.distributed.cluster import cluster_from_environment
    from opt_train.distributed.hosts import Ssh
    from opt_train.distributed.launcher import launch
    from opt_train.distributed.names import launch_backend

    if os.environ.get("HOROVOD_RANK"):
        raise ConfigUsageError("--np inside a Horovod rank: give either --np or horovodrun, not both")
    with user_errors():
        cluster = cluster_from_environment()
    if cluster is not None and cluster.num_workers > 1:
        raise ConfigUsageError(f"--np inside a worker of a {cluster.num_workers}-worker job ({cluster.source}): "
                               "give either --np or a cluster launcher, not both")
    if hosts:
        _check_hosts(hosts, num_proc)
    workers = launch_config(config, num_proc)
    check_distribution(workers, ranks=num_proc)
    from opt_train.config.validate import check_placement

    with user_errors():
        check_placement(workers, num_proc)  # a mesh the workers cannot share: refused before any starts
    command = [sys.executable, "-m", "opt_train", "train", *flags]
    for path in configs:
        command += ["--config", path]
    for text in overrides:
        command += ["--set", text]
    if workers.distributed != config.distributed:
        command += ["--set", f"distributed={workers.distributed}"]
    code, message = launch(command, num_proc, hosts=hosts, rank_timeout=config.rank_timeout_secs,
                           backend=launch_backend(workers.distributed), ssh=Ssh(*ssh), max_restarts=max_restarts)
    if message:
        _record_launch_failure(config.logdir, code, message)
        click.echo(f"Error: {message}", err=True)
    raise click.exceptions.Exit(code)


def _record_launch_failure(logdir, code, message):
    """In a sweep's trial, the launcher's verdict is the trial's failure record (opt_train/trial.py)."""
    from opt_train import trial

    if trial.description() is None:
        return
    try:
        trial.write_launch_failure(logdir, code, message)
    except OSError:
        pass  # a logdir that cannot be written: the sweep falls back to the log, where the verdict is too


def _check_hosts(hosts, num_proc):
    """`host:slots,...` with room for `num_proc` ranks, or exit 2 naming --hosts."""
    slots = 0
    for item in hosts.split(","):
        name, _, count = item.rpartition(":")
        if not name or not count.isdigit() or int(count) < 1:
            raise ConfigUsageError(f"--hosts: {item!r} is not HOST:SLOTS (e.g. server1:4,server2:4)")
        slots += int(count)
    if slots < num_proc:
        raise ConfigUsageError(f"--hosts: {slots} slots for --np {num_proc} workers; give at least {num_proc}")
