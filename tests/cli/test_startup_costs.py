"""What a command pays before its first step: TensorFlow's import without Keras's optional bridges
(scikit-learn, pandas, matplotlib, IPython) and without the garbage collector walking it, the digits
without scikit-learn, the steps traced without AutoGraph."""

import gc
import json
import sys

import pytest

from opt_train import keras_bridges, quiet
from tests.support import END_WITHOUT_TEARDOWN, SMALL_RUN, run_python, write_run

# A command's process: TensorFlow imported as every command imports it, AutoGraph's
# conversions recorded, one run that reports, summarizes, evaluates and exports; then
# what it loaded, what Keras saw of the bridged modules, and which functions were converted.
COMMAND = """
import gc, json, sys
from opt_train import quiet
collections = {"import": [], "run": []}
phase = ["import"]
gc.callbacks.append(lambda stage, info: stage == "start" and collections[phase[0]].append(info["generation"]))
quiet.import_tensorflow()
phase[0] = "run"
collected_by_the_import = {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}
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
    "collector": {**collected_by_the_import, "collections": collections},
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
def test_the_import_runs_no_collection_and_later_ones_skip_what_it_made(command):
    # Python's own thresholds run five full collections during the import (2026-11-29).
    collector = command["collector"]
    assert collector["collections"]["import"] == []
    assert collector["enabled"]
    assert collector["frozen"] > 100_000  # the import's objects (about 450,000)
    assert collector["collections"]["run"], "the run made no collection at all: the hook is not where it was"


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


@pytest.fixture
def tensorflow_not_yet_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "tensorflow")
    frozen = gc.get_freeze_count()
    yield
    assert gc.isenabled()
    if gc.get_freeze_count() != frozen:
        gc.unfreeze()  # this worker's objects are no import's; they go back to be collected


def test_an_import_that_fails_leaves_the_collector_on_and_nothing_frozen(tensorflow_not_yet_imported):
    frozen = gc.get_freeze_count()
    with pytest.raises(ImportError):
        with quiet._collector_paused():
            assert not gc.isenabled()
            raise ImportError("libcudart.so.12: cannot open shared object file")
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen


def test_a_collector_the_caller_turned_off_stays_off(tensorflow_not_yet_imported):
    gc.disable()
    try:
        with quiet._collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
