"""Suite-wide set-up: quiet TensorFlow, the suite's own temporary folder, helpers for configs and the CLI."""

import os
import shutil
import tempfile

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The folder every process of one suite run uses as its temporary folder (`TMPDIR`), `<prefix><pid>-<random>`.
SUITE_TEMPORARY_PREFIX = "opt-train-tests-"


def pytest_configure(config):
    """A process that runs tests imports TensorFlow as every command does, before any test module.

    `quiet.import_tensorflow` leaves Keras's optional bridges out (~4 s of CPU less than a
    plain `import tensorflow` in each xdist worker), and the tests run in-process against the
    same Keras a command has. xdist's controller runs no test and does not import it; it (or
    the one process of `-n 0`) makes the suite's temporary folder first.
    """
    if not hasattr(config, "workerinput"):
        _use_a_temporary_folder_of_the_suite(config)
    controller = config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))
    if hasattr(config, "workerinput") or not controller:
        from opt_train import quiet

        quiet.import_tensorflow()


def _use_a_temporary_folder_of_the_suite(config):
    """Every process of the suite (xdist's workers, their children) keeps its temporary files in one folder,
    removed at the end.

    What a process removes as it ends, a process the tests kill leaves: AutoGraph's sources and
    their bytecode (TensorFlow removes the sources at exit, not the bytecode), a server's folder.
    A whole suite left about 35 sources and 70 `.pyc` in `/tmp`. The folder is made before xdist
    starts its workers, which inherit `TMPDIR`; one that an interrupted run left is removed by the
    next (`scratch.remove_orphans`). pytest's `tmp_path` folders stay where they were
    (`PYTEST_DEBUG_TEMPROOT`), kept for the last three runs as pytest keeps them.
    """
    from opt_train import scratch

    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    scratch.remove_orphans(SUITE_TEMPORARY_PREFIX)
    folder = scratch.make_folder(SUITE_TEMPORARY_PREFIX)
    # As /tmp: the suite's servers run as users of their own (PostgreSQL as `postgres`) and reach their folders in it.
    os.chmod(folder, 0o1777)
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = None
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


@pytest.fixture(autouse=True)
def _quiet_settings_kept():
    """Fails the test (at its teardown) that leaves the log settings of this process changed:
    every later test's child processes would inherit them (`--verbose` shows TensorFlow's lines)."""
    from tests.support import QUIET_SETTINGS

    before = {name: os.environ.get(name) for name in QUIET_SETTINGS}
    yield
    after = {name: os.environ.get(name) for name in QUIET_SETTINGS}
    assert after == before, f"the test changed this process's log settings: {before} -> {after}"


@pytest.fixture(autouse=True)
def _keras_dtype_policy_restored():
    """The next test on this worker finds Keras's global dtype policy as this one found it.

    `build_run` sets the global policy for its run (`dtype: mixed` makes it mixed_float16), as a
    command does once per process, and leaves it. A test that built a plain Keras model after such
    a run on the same xdist worker computed in float16: a MobileNet reference's 1e-17 outputs
    underflowed to 0, and a comparison with them failed (a clean-clone CI run, 2026-11-29).
    """
    import keras  # imported already: pytest_configure imports TensorFlow in every process that runs tests

    before = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(before)


@pytest.fixture
def write_config(tmp_path):
    """Writes a YAML config (a dict, layered over nothing; logdir tmp_path/run unless it names one) and returns its path."""

    from tests.support import write_run

    def write(payload, name="config.yaml"):
        return write_run(tmp_path, payload, name, logdir=None if "logdir" in payload else "run")

    return write


@pytest.fixture(scope="module")
def no_export():
    """`tests.support.without_export()` for the rest of the module (its module fixtures too): use it module-wide."""
    from tests.support import without_export

    with without_export():
        yield


@pytest.fixture
def cli():
    """Runs `opt-train ARGS` in this process (one TensorFlow import for the whole suite)."""
    from click.testing import CliRunner

    from opt_train.cli.main import cli as group

    def run(*args):
        return CliRunner().invoke(group, [str(a) for a in args], catch_exceptions=False)

    return run


# A test over this many seconds belongs behind `@pytest.mark.slow`, so that `-m "not slow"`
# stays a quick check. Reported at the end of a run, never failed on: durations depend on
# the machine and its load.
SLOW_SECONDS = 5.0
_unmarked_slow = []


def pytest_runtest_logreport(report):
    if report.when == "call" and report.duration > SLOW_SECONDS and "slow" not in report.keywords:
        _unmarked_slow.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter):
    if _unmarked_slow:
        terminalreporter.section(f"tests over {SLOW_SECONDS:.0f} s not marked slow")
        for seconds, nodeid in sorted(_unmarked_slow, reverse=True):
            terminalreporter.write_line(f"{seconds:7.1f}s {nodeid}")


def _one_case_fast(items):
    """Of a test marked `one_case_fast`, the last case stays in the fast subset; the others are marked slow.

    For the parity tests of one rule under several settings, dense and sparse: their last
    case (sparse, whose problem has dense variables too, under the last setting) runs in
    `-m "not slow"`; every case runs in the whole suite.
    """
    cases = {}
    for item in items:
        if item.get_closest_marker("one_case_fast") is not None:
            cases.setdefault((item.path, item.originalname), []).append(item)
    for each_test in cases.values():
        for item in each_test[:-1]:
            item.add_marker(pytest.mark.slow)


def _shared_fixture_groups(items):
    """Tests that share a fixture wider than one test (module, class or session scope, defined
    under tests/) go to one xdist worker: `xdist_group` by the connected tests, so that the
    fixture is built once, not once on each worker that happens to get one of its tests.

    A module-scoped run of a minute, split over two workers, is trained twice (test_mesh.py's
    matrix was: 150 s of CPU for nothing). Explicit `xdist_group` marks join their tests too;
    each test ends with exactly one group mark, its component's (xdist joins every
    `xdist_group` mark it finds into the group's name).
    """
    parent = {}

    def root(key):
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    def join(a, b):
        parent[root(a)] = root(b)

    for item in items:
        keys = [f"group {mark.args[0] if mark.args else mark.kwargs.get('name', 'default')}"
                for mark in item.iter_markers("xdist_group")]
        fixtureinfo = getattr(item, "_fixtureinfo", None)
        for name, definitions in (fixtureinfo.name2fixturedefs.items() if fixtureinfo else ()):
            definition = definitions[-1]
            if definition.scope == "function" or not definition.baseid:  # "": a plugin's (tmp_path_factory)
                continue
            # A module- or class-scoped fixture of a conftest is built once per module or class.
            holder = {"module": item.path, "class": getattr(item.cls, "__qualname__", None)}.get(definition.scope, "")
            keys.append(f"fixture {definition.baseid}::{name} {holder}")
        for key in keys:
            join(item.nodeid, key)

    groups = {}
    for item in items:
        groups.setdefault(root(item.nodeid), []).append(item)
    for members in groups.values():
        if len(members) < 2:
            continue
        name = min(item.nodeid for item in members).split("::")[0]
        for item in members:
            for node in item.listchain():
                node.own_markers[:] = [mark for mark in node.own_markers if mark.name != "xdist_group"]
            item.add_marker(pytest.mark.xdist_group(name))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Modules with a slow test run first, each module's tests kept together and in order.

    xdist (`--dist loadgroup`) hands out the single tests in this order as workers free up:
    with the long ones early, a run ends on short tests on every worker, instead of one
    worker finishing a minute-long test alone while the other idles. Before pytest's own
    reordering (`tryfirst`), so that its grouping by fixture still applies.
    """
    _one_case_fast(items)
    _shared_fixture_groups(items)
    slow_modules = {item.module.__name__ for item in items
                    if item.get_closest_marker("slow") is not None and getattr(item, "module", None)}
    items.sort(key=lambda item: getattr(getattr(item, "module", None), "__name__", "") not in slow_modules)
