"""`cli/common.user_errors`: a config key found wrong only while the run goes is one line naming it, exit 2;
a library call's argument error keeps its traceback (TF-free)."""

import pytest

from opt_train.cli.common import ConfigUsageError, user_errors
from opt_train.config import ConfigError
from opt_train.config.layering import parse_override
from opt_train.errors import USAGE_EXIT_CODE, ParamError


def test_a_param_error_at_a_config_key_ends_the_command_with_exit_2_and_one_line():
    with pytest.raises(ConfigUsageError) as caught:
        with user_errors():
            raise ParamError.at("early_stopping.monitor", "unknown_name",
                                "is not an eval metric (this run's evaluation reports accuracy, loss)", "acuracy")
    assert caught.value.exit_code == USAGE_EXIT_CODE
    assert caught.value.format_message() == (
        "early_stopping.monitor: is not an eval metric (this run's evaluation reports accuracy, loss). "
        "Received: 'acuracy' [unknown_name]")
    assert caught.value.__suppress_context__  # raised `from None`: no traceback of ours above the line


def test_a_param_error_of_a_library_argument_is_a_bug_and_keeps_its_traceback():
    heard = []
    with pytest.raises(ParamError):
        with user_errors(on_failure=lambda error, code, message: heard.append((code, message))):
            raise ParamError.said("op", "unknown_name", "`op` must be one of 'mean', 'sum'. Received: op='max'", "max")
    assert heard == [(1, "ParamError: `op` must be one of 'mean', 'sum'. Received: op='max'")]


def test_a_set_value_over_the_bounds_is_filed_at_its_key_with_its_code():
    with pytest.raises(ConfigError) as caught:
        parse_override("max_steps=" + "[" * 5000 + "]" * 5000)
    (issue,) = caught.value.issues
    assert (issue.key, issue.code) == ("max_steps", "bad_override")
    assert "nested more than" in issue.message
