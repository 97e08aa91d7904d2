"""`opt-train lr`: print, and optionally save or plot, the learning-rate schedule of a config."""

from __future__ import annotations

import os

import click

from opt_train.cli.common import ConfigUsageError, config_options, import_tensorflow, load, user_errors
from opt_train.config import ConfigError, ConfigIssue


@click.command()
@config_options
@click.option(
    "--steps", type=click.IntRange(min=1), help="Updates to show (default: the run's, max_steps or num_epochs x updates per epoch)."
)
@click.option("--every", type=click.IntRange(min=1), help="One table/CSV row every K updates.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write the table as CSV.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Save a PNG plot.")
def lr(configs, overrides, steps, every, csv_path, plot_path):
    """Show the learning rate at each optimizer update, without building a model."""
    config = load(configs, overrides)
    with user_errors():
        for option, path in (("--csv", csv_path), ("--plot", plot_path)):
            _check_output(option, path)
    import_tensorflow()
    with user_errors():
        from opt_train.distributed import SingleProcess
        from opt_train.lr_policies import preview
        from opt_train.training.builder import build_data_for, learning_rate_schedule, run_length

        max_steps, updates_per_epoch = run_length(config, build_data_for(config, SingleProcess()))
        if (steps or max_steps) > preview.MAX_STEPS:
            message = (
                f"{steps or max_steps:,} updates are more than the preview evaluates "
                f"({preview.MAX_STEPS:,}); show the start with --steps N"
            )
            key = "max_steps" if config.max_steps else "num_epochs"
            issue = ConfigIssue(None, None, "--steps", "too_large", message) if steps else config.issue(
                key, message, "too_large"
            )
            raise ConfigError([issue])
        steps = steps or max_steps
        schedule, _ = learning_rate_schedule(
            config, steps, updates_per_epoch, constant_as_schedule=True
        )
        values = preview.evaluate(schedule, steps)
    every = every or preview.default_every(steps)
    title = f"lr_policy: {config.lr_policy or 'fixed'}"
    if config.warmup:
        title += f", warmup: {config.warmup.get('steps')} updates"
    click.echo(preview.format_report(values, every, title))
    scaled = [f"optimizer_groups[{i}] x {group['lr_multiplier']:g}" for i, group in enumerate(config.optimizer_groups)
              if group["lr_multiplier"] != 1.0]
    if scaled:
        click.echo(f"the run's rate; these groups train at it times their lr_multiplier: {', '.join(scaled)}")
    try:
        if csv_path:
            rows = preview.sample(values, every)
            preview.write_csv(csv_path, rows)
            click.echo(f"wrote {os.path.abspath(csv_path)}: {len(rows)} rows of step,learning_rate "
                       f"(every {every} updates)", err=True)
        if plot_path:
            preview.write_plot(plot_path, values, title)
            click.echo(f"wrote {os.path.abspath(plot_path)}: the learning rate over {len(values)} updates (PNG)",
                       err=True)
    except OSError as error:
        option = "--csv" if csv_path and error.filename == csv_path else "--plot"
        issue = ConfigIssue(None, None, option, "wrong_type", f"cannot be written: {error.strerror}", error.filename)
        raise ConfigUsageError(str(ConfigError([issue]))) from None


def _check_output(option, path):
    """An output file whose folder does not exist is refused before anything is computed (exit 2)."""
    import os

    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        message = f"the folder {folder} does not exist"
        raise ConfigError([ConfigIssue(None, None, option, "file_not_found", message, path)])
