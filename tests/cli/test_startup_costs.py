"""What a command pays before its first step: TensorFlow's import without Keras's optional bridges
(scikit-learn, pandas, matplotlib, IPython), the digits without scikit-learn, the steps traced without AutoGraph."""

import json
import sys

import pytest

from opt_train import keras_bridges
from tests.support import END_WITHOUT_TEARDOWN, SMALL_RUN, run_python, write_run

# A command's process: TensorFlow imported as every command imports it, AutoGraph's
# conversions recorded, one run that reports, summarizes, evaluates and exports; then
# what it loaded, what Keras saw of the bridged modules, and which functions were converted.
COMMAND = """
import json, sys
from opt_train import quiet
quiet.import_tensorflow()
from tensorflow.python.autograph.pyct import transpiler
converted = []
transform = transpiler.PyToPy.transform
def recording(self, fn, user_context):
    converted.append(getattr(fn, "__module__", "") + ":" + getattr(fn, "__qualname__", ""))
    return transform(self, fn, user_context)
transpiler.PyToPy.transform = recording
from opt_train.cli.main import main
try:
    main(["train", "--config", sys.argv[1], "--no-resume"])
except SystemExit as stop:
    assert not stop.code, stop.code
import keras
from keras.src.trainers.data_adapters import array_slicing
from keras.src.wrappers import sklearn_wrapper
from keras.src.saving import file_editor
print(json.dumps({
    "loaded": {name: name in sys.modules for name in ("tensorflow", "sklearn", "pandas", "matplotlib", "IPython")},
    "keras_sees": {"pandas": array_slicing.pandas is not None, "sklearn": sklearn_wrapper.sklearn is not None,
                   "IPython": file_editor.ipython is not None},
    # No mark is left behind, so the process itself imports them as usual afterwards.
    "marked": [name for name, module in sys.modules.items() if module is None],
    "converted": converted,
}))
""" + END_WITHOUT_TEARDOWN


@pytest.fixture(scope="module")
def command(tmp_path_factory):
    folder = tmp_path_factory.mktemp("startup")
    config = write_run(folder, {**SMALL_RUN, "print_loss_steps": 3, "save_summaries_steps": 3}, "run.yaml")
    done = run_python(COMMAND, config)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a fresh process that imports TensorFlow and trains: ~8 s
def test_a_digits_run_leaves_the_bridges_out_and_the_process_can_import_them(command):
    assert command["loaded"] == {"tensorflow": True, "sklearn": False, "pandas": False, "matplotlib": False,
                                 "IPython": False}
    assert command["keras_sees"] == {"pandas": False, "sklearn": False, "IPython": False}
    assert command["marked"] == []


@pytest.mark.slow
def test_the_steps_and_the_data_pipeline_are_traced_without_autograph(command):
    # As Keras 3's fit traces its step. The SavedModel export's signature functions, which
    # TensorFlow itself defines, it still converts.
    assert command["converted"], "the recording saw no conversion at all: the hook is not where it was"
    assert [name for name in command["converted"] if name.startswith("opt_train")] == []


def test_modules_imported_before_keras_stay_and_the_marks_go(monkeypatch):
    monkeypatch.delitem(sys.modules, "keras", raising=False)
    monkeypatch.setitem(sys.modules, "pandas", sys.modules.get("pandas") or object())
    monkeypatch.delitem(sys.modules, "sklearn", raising=False)
    before = sys.modules["pandas"]
    with keras_bridges.left_out():
        assert sys.modules["pandas"] is before
        assert sys.modules["sklearn"] is None
    assert sys.modules["pandas"] is before
    assert "sklearn" not in sys.modules


def test_nothing_is_marked_once_keras_is_loaded(monkeypatch):
    monkeypatch.setitem(sys.modules, "keras", sys.modules.get("keras") or object())
    monkeypatch.delitem(sys.modules, "sklearn", raising=False)
    with keras_bridges.left_out():
        assert "sklearn" not in sys.modules
