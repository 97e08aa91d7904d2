"""Your own transforms in the pipeline: each runs at the place `after` names, checked against NumPy;
bad entries are one located line (exit 2) from `validate` and from `train`."""

import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers import GradientTransform
from opt_train.optimizers.pipeline import optimize_loss
from opt_train.optimizers.transform import init_empty
from opt_train.optimizers.user_transforms import build, check_entry

GRAD = np.array([30.0, 40.0, 0.0], np.float32)  # norm 50


def _problem():
    """loss = <w, GRAD> * x, so every micro-batch's gradient is GRAD * x."""
    weights = tf.Variable([1.0, 2.0, 3.0])

    def loss(batch):
        return tf.reduce_sum(weights * GRAD) * batch

    return weights, loss


def _times(factor):
    def update(grads, state, variables=None, **extra):
        return [None if g is None else g * factor for g in grads], state

    return GradientTransform(init_empty, update)


def _make_nan():
    return _times(float("nan"))


def _recorder():
    """Counts its calls and keeps the largest |gradient| it last saw; `seen` holds its state."""
    seen = []

    def init(variables):
        seen.append((tf.Variable(0, dtype=tf.int64), tf.Variable(0.0)))
        return seen[-1]

    def update(grads, state, variables=None, **extra):
        state[0].assign_add(1)
        state[1].assign(tf.reduce_max(tf.abs(tf.convert_to_tensor(grads[0]))))
        return grads, state

    return GradientTransform(init, update), seen


def _train(transforms, batches, **kwargs):
    weights, loss = _problem()
    before = weights.numpy().copy()
    train_op = optimize_loss(loss, "SGD", {"learning_rate": 1.0}, var_list=[weights],
                             gradient_transforms=transforms, **kwargs)
    result = None
    for batch in batches:
        result = train_op(tf.constant(batch))
    return weights.numpy() - before, result


@pytest.mark.parametrize("after, expected_norm", [("finite", 1.0), ("clip", 10.0), ("larc", 10.0)])
def test_after_clip_sees_the_clipped_gradient(after, expected_norm):
    delta, _ = _train([(after, _times(10.0))], [1.0], clip_gradients=1.0)
    # SGD at lr 1: the step is minus the gradient the optimizer received.
    np.testing.assert_allclose(delta, -GRAD / 50.0 * expected_norm, rtol=1e-6)


def test_after_unscale_runs_per_micro_batch_on_unscaled_gradients_after_accumulate_per_update():
    (per_micro, micro_state), (per_update, update_state) = _recorder(), _recorder()
    weights, loss = _problem()
    train_op = optimize_loss(
        loss, "SGD", {"learning_rate": 1.0}, var_list=[weights], iter_size=2, loss_scaling=128.0,
        gradient_transforms=[("unscale", per_micro), ("accumulate", per_update)],
    )
    for x in [1.0, 3.0, 2.0, 2.0]:
        train_op(tf.constant(x))
    (micro_calls, micro_max), = micro_state
    (update_calls, update_max), = update_state
    assert (int(micro_calls.numpy()), int(update_calls.numpy())) == (4, 2)
    # Unscaled (not 128x): the last micro-batch's gradient is 40 * 2, the last update's the mean of 2 and 2.
    np.testing.assert_allclose([float(micro_max.numpy()), float(update_max.numpy())], [80.0, 80.0])
    np.testing.assert_allclose(weights.numpy(), [1, 2, 3] - GRAD * (2.0 + 2.0), rtol=1e-6)


def test_non_finite_after_allreduce_is_skipped_after_finite_is_not_judged():
    delta, result = _train([("allreduce", _make_nan())], [1.0])
    assert int(result["skipped_steps"]) == 1 and not bool(result["applied"])
    np.testing.assert_array_equal(delta, 0.0)
    delta, result = _train([("finite", _make_nan())], [1.0])
    assert int(result["skipped_steps"]) == 0 and bool(result["applied"])
    assert np.all(np.isnan(delta))


def test_yaml_entries_build_from_a_module_path_and_a_builtin():
    built = build([
        {"factory": "examples.my_grads:clip_by_value", "params": {"max_value": 0.5}, "after": "allreduce"},
        {"factory": "gradient_noise", "params": {"stddev": 0.1}},
    ])
    assert [place for place, _ in built] == ["allreduce", "clip"]
    delta, _ = _train([built[0]], [1.0])
    np.testing.assert_allclose(delta, [-0.5, -0.5, 0.0])


def halve_large(threshold):
    """A transform written with a Python `if` over a tensor, as Optax-style code may be."""
    def update(grads, state, variables=None, **extra):
        norm = tf.linalg.global_norm([g for g in grads if g is not None])
        if norm > threshold:
            grads = [None if g is None else g * 0.5 for g in grads]
        return grads, state

    return GradientTransform(init_empty, update)


@pytest.mark.parametrize("form", ["yaml", "python"])
def test_a_transform_with_python_control_flow_over_tensors_still_traces(form):
    # The step is traced without AutoGraph (as Keras 3's fit); a user's transform keeps it.
    if form == "yaml":
        entries = [{"factory": f"{__name__}:halve_large", "params": {"threshold": 10.0}, "after": "allreduce"}]
    else:
        entries = [("allreduce", halve_large(10.0))]
    delta, _ = _train(build(entries), [1.0, 0.1])
    # |GRAD| = 50 > 10: halved at x = 1; |GRAD * 0.1| = 5: kept.
    np.testing.assert_allclose(delta, -GRAD * 0.5 - GRAD * 0.1, rtol=1e-6)


@pytest.mark.parametrize(
    "entry, key, code",
    [
        ({"factory": "gradient_noise", "params": {"eta": 1.0}, "after": "alreduce"}, "[0].after", "unknown_name"),
        ({"factory": "gradient_nose"}, "[0].factory", "unknown_name"),
        ({"factory": "gradient_noise", "params": {"etta": 1.0}}, "[0].params.etta", "unknown_key"),
        ({"factory": "gradient_noise", "params": {"eta": 0}}, "[0].params.eta", "out_of_range"),
        ({"factory": "gradient_noise"}, "[0].params", "missing"),
        ({"params": {}}, "[0].factory", "missing"),
        ({"factory": "a.b:c", "when": 1}, "[0].when", "unknown_key"),
        ({"factory": "a.b:c", "params": [1]}, "[0].params", "wrong_type"),
    ],
)
def test_entry_errors_name_their_key(entry, key, code):
    with pytest.raises(ValueError) as caught:
        check_entry(0, entry)
    assert caught.value.key == f"gradient_transforms{key}"
    assert caught.value.code == code


@pytest.mark.parametrize(
    "factory, params, key, text",
    [
        ("no_such_package.grads:add_noise", {}, "factory", "cannot import module 'no_such_package.grads'"),
        ("examples.my_grads:nothing_here", {}, "factory", "has no function 'nothing_here'"),
        ("examples.my_grads:clip_by_value", {}, "params.max_value", "is required"),
        ("examples.my_grads:clip_by_value", {"max_value": -1}, "params.max_value", "`max_value` must be > 0"),
        ("examples.my_grads:clip_by_value", {"max_valu": 1}, "params.max_valu", "did you mean 'max_value'"),
        ("numpy:zeros_like", {"a": 1}, "factory", "must return an opt_train.optimizers.GradientTransform"),
    ],
)
def test_factory_errors_found_while_building_name_their_key(factory, params, key, text):
    with pytest.raises(ValueError, match=text) as caught:
        build([{"factory": factory, "params": params}])
    assert caught.value.key == f"gradient_transforms[0].{key}"


def test_every_bad_entry_is_reported_at_its_own_line(tmp_path):
    from opt_train.config import ConfigError, load_config

    path = tmp_path / "c.yaml"
    path.write_text(
        "max_steps: 2\n"
        "gradient_transforms:\n"
        "  - {factory: gradient_noise, params: {eta: 0.1}, after: alreduce}\n"
        "  - {factory: gradient_noise, params: {eta: 0.1}}\n"
        "  - {factory: gradient_noise, params: {stddev: -1}}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config([str(path)])
    found = [(issue.key, issue.line, issue.code) for issue in caught.value.issues]
    assert found == [("gradient_transforms[0].after", 3, "unknown_name"),
                     ("gradient_transforms[2].params.stddev", 5, "out_of_range")]


def test_validate_and_train_report_one_located_line(cli, write_config):
    bad_stage = write_config({
        "max_steps": 2,
        "gradient_transforms": [{"factory": "gradient_noise", "params": {"eta": 0.1}, "after": "alreduce"}],
    })
    result = cli("validate", "--config", bad_stage)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert ("gradient_transforms[0].after: unknown pipeline stage 'alreduce'; did you mean 'allreduce'? "
            "[unknown_name]") in result.output
    bad_factory = write_config({
        "max_steps": 2, "gradient_transforms": [{"factory": "no_such_package.grads:add_noise"}],
    }, name="factory.yaml")
    assert cli("validate", "--config", bad_factory).exit_code == 0  # user code is imported only to train
    result = cli("train", "--config", bad_factory)
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if "gradient_transforms" in line]
    assert len(lines) == 1 and f"{bad_factory}:" in lines[0], result.output
    assert "gradient_transforms[0].factory: cannot import module 'no_such_package.grads'" in lines[0]


@pytest.mark.slow  # 3 s on 2 cores
def test_train_with_gradient_noise_end_to_end(cli, write_config, tmp_path):
    config = write_config({
        "max_steps": 6, "batch_size_per_gpu": 16, "iter_size": 2, "print_loss_steps": 3,
        "eval_steps": None, "save_checkpoint_steps": 3, "model_params": {"hidden_units": [8]},
        "gradient_transforms": [{"factory": "gradient_noise", "params": {"eta": 0.01}, "after": "allreduce"}],
    })
    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output
    assert "step 6/6" in result.output
