#!/usr/bin/env bash
# Installs Horovod 0.28.1 (TensorFlow + Gloo, no MPI, no PyTorch/MXNet) built against the
# TensorFlow that is installed in the current Python environment.
#
# Why a script and not `pip install horovod`: Horovod ships only an sdist that compiles
# against the installed TensorFlow, and on TF 2.21 one of its sources (xla_mpi_ops.cc,
# the XLA-on-GPU custom ops) includes XLA headers the TF wheel no longer ships. The script
# drops that source, builds a wheel and caches it keyed by TensorFlow and Python version.
#
# Idempotent. In order:
#   1. `import horovod.tensorflow` already works          -> nothing to do (once it worked, a
#      stamp of the libraries it loads answers until one of them changes);
#   2. a cached wheel for this TF and Python exists         -> install it;
#   3. otherwise download the sdist, patch, build, cache, install.
#
# Environment:
#   PYTHON            interpreter to install into (default: python)
#   OPT_TRAIN_CACHE   cache root (default: $HOME/.cache/opt-train); wheels live in
#                     $OPT_TRAIN_CACHE/wheels/horovod-0.28.1-tf<TF version>-cp<XY>/
#   HOROVOD_FORCE_BUILD=1  ignore an installed Horovod and the cache; rebuild.
#
# Exit status: 0 when `import horovod.tensorflow` works afterwards, 1 otherwise (with the
# reason on stderr).
set -euo pipefail

HOROVOD_VERSION=0.28.1
PYTHON=${PYTHON:-python}
CACHE_ROOT=${OPT_TRAIN_CACHE:-$HOME/.cache/opt-train}

say() { echo "install_horovod: $*"; }
die() {
    echo "install_horovod: ERROR: $*" >&2
    exit 1
}

horovod_imports() {
    # Importing horovod.tensorflow loads its compiled op library, which fails when it was
    # built against another TensorFlow; so this also checks the build matches. The import
    # takes ~10 s of CPU (all of TensorFlow's), paid before every test run: once it worked,
    # a stamp of the compiled libraries it loads stands for it while they stay the same.
    local stamp=$CACHE_ROOT/horovod-imports.stamp fingerprint
    fingerprint=$(compiled_libraries) || return 1
    if [[ -f $stamp && $(<"$stamp") == "$fingerprint" ]]; then
        return 0
    fi
    "$PYTHON" -c "import horovod.tensorflow" >/dev/null 2>&1 || return 1
    mkdir -p "$CACHE_ROOT" && echo "$fingerprint" >"$stamp" || true
}

compiled_libraries() {
    # Path, size and modification time of Horovod's op library and TensorFlow's own libraries,
    # and this Python: found without importing either package (a reinstall of one changes it).
    "$PYTHON" - <<'EOF'
import glob, importlib.util, os, sys
lines = [sys.executable, sys.version]
for package, folders in (("horovod", ("tensorflow",)), ("tensorflow", ("", "python"))):
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(1)
    root = list(spec.submodule_search_locations)[0]
    found = sorted(path for folder in folders for path in glob.glob(os.path.join(root, folder, "*.so*")))
    if not found:
        sys.exit(1)
    lines += [f"{path} {os.stat(path).st_size} {os.stat(path).st_mtime_ns}" for path in found]
print("\n".join(lines))
EOF
}

installed_tf_version() {
    # Read from the package metadata: importing TensorFlow takes seconds.
    "$PYTHON" - <<'EOF'
import importlib.metadata as md
for dist in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly"):
    try:
        print(md.version(dist))
        break
    except md.PackageNotFoundError:
        pass
EOF
}

require_build_tools() {
    local missing=()
    command -v cmake >/dev/null 2>&1 || missing+=("cmake")
    command -v make >/dev/null 2>&1 || missing+=("make")
    if ! command -v c++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1; then
        missing+=("a C++ compiler (g++)")
    fi
    if ((${#missing[@]})); then
        die "building Horovod needs: ${missing[*]}. Install them (Debian/Ubuntu:" \
            "apt-get install -y cmake make g++; or 'pip install cmake' for cmake) and rerun."
    fi
    "$PYTHON" -c "import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" ||
        die "building Horovod needs the Python headers (Python.h) of $PYTHON (Debian: apt-get install -y python3-dev)."
}

patch_out_xla_ops() {
    # Removes the XLA custom-call ops from the TensorFlow extension's source list; they
    # only matter with XLA on GPU and do not compile against the TF 2.21 wheel.
    local cmakelists=$1/horovod/tensorflow/CMakeLists.txt
    [[ -f $cmakelists ]] || die "unexpected sdist layout: $cmakelists not found."
    if grep -q 'xla_mpi_ops\.cc' "$cmakelists"; then
        # In 0.28.1 the source sits alone on a `list(APPEND TF_SOURCES ...)` line.
        sed -i '/xla_mpi_ops\.cc/d' "$cmakelists"
    fi
    if grep -q 'xla_mpi_ops\.cc' "$cmakelists"; then
        die "could not remove xla_mpi_ops.cc from $cmakelists; the patch did not apply."
    fi
    say "patched $cmakelists: xla_mpi_ops.cc removed from the build."
}

build_wheel() {
    local wheel_dir=$1
    local work
    work=$(mktemp -d "${TMPDIR:-/tmp}/horovod-build.XXXXXX")
    # shellcheck disable=SC2064  # expand $work now: it is local.
    trap "rm -rf '$work'" EXIT

    require_build_tools
    say "downloading the Horovod $HOROVOD_VERSION sdist ..."
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
        "horovod==$HOROVOD_VERSION" -d "$work/sdist" ||
        die "could not download horovod==$HOROVOD_VERSION from the package index."
    local sdist
    sdist=$(ls "$work"/sdist/horovod-"$HOROVOD_VERSION".tar.gz 2>/dev/null | head -n1 || true)
    [[ -n $sdist ]] || die "pip download produced no horovod-$HOROVOD_VERSION.tar.gz."
    tar -xzf "$sdist" -C "$work"
    local src=$work/horovod-$HOROVOD_VERSION
    patch_out_xla_ops "$src"

    # The build imports the installed TensorFlow (no build isolation) and setup.py's
    # build helpers; make sure those are present.
    "$PYTHON" -m pip install --quiet "wheel" "cloudpickle" "psutil" "pyyaml" "packaging" "cffi>=1.4.0" ||
        die "could not install Horovod's build requirements."

    say "building the wheel against TensorFlow $TF_VERSION (takes several minutes) ..."
    local log=$work/build.log
    # CMAKE_POLICY_VERSION_MINIMUM: Horovod's bundled Gloo asks for CMake 2.8.12, which
    # CMake 4 refuses unless told the oldest policy version to assume; CMake 3 ignores it.
    if ! HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
        CMAKE_POLICY_VERSION_MINIMUM=3.5 \
        HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 MAKEFLAGS=${MAKEFLAGS:--j$(nproc)} \
        "$PYTHON" -m pip wheel --no-build-isolation --no-deps --verbose \
        -w "$work/wheel" "$src" >"$log" 2>&1; then
        local kept=${TMPDIR:-/tmp}/horovod-build-failed.log
        cp "$log" "$kept"
        echo "----- last lines of the build log -----" >&2
        tail -n 40 "$log" >&2
        die "the Horovod build failed against TensorFlow $TF_VERSION; full log: $kept"
    fi
    mkdir -p "$wheel_dir"
    cp "$work"/wheel/horovod-"$HOROVOD_VERSION"-*.whl "$wheel_dir"/ ||
        die "the build produced no wheel."
    say "cached the wheel in $wheel_dir"
}

main() {
    if [[ ${HOROVOD_FORCE_BUILD:-0} != 1 ]] && horovod_imports; then
        say "horovod.tensorflow already imports with the installed TensorFlow; nothing to do."
        return 0
    fi

    TF_VERSION=$(installed_tf_version)
    [[ -n $TF_VERSION ]] || die "TensorFlow is not installed for $PYTHON; install the project first (pip install -e .)."
    local py_tag
    py_tag=$("$PYTHON" -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
    # Keyed by directory: a wheel's file name must keep its standard form for pip.
    local wheel_dir=$CACHE_ROOT/wheels/horovod-$HOROVOD_VERSION-tf$TF_VERSION-$py_tag

    local cached
    cached=$(ls "$wheel_dir"/horovod-"$HOROVOD_VERSION"-"$py_tag"-*.whl 2>/dev/null | head -n1 || true)
    if [[ ${HOROVOD_FORCE_BUILD:-0} == 1 || -z $cached ]]; then
        build_wheel "$wheel_dir"
        cached=$(ls "$wheel_dir"/horovod-"$HOROVOD_VERSION"-"$py_tag"-*.whl 2>/dev/null | head -n1 || true)
        [[ -n $cached ]] || die "the build reported success but left no wheel in $wheel_dir."
    else
        say "reusing the cached wheel $cached (built against TensorFlow $TF_VERSION)."
    fi

    say "installing $cached ..."
    # --no-deps for TensorFlow's sake (never let pip touch it); Horovod's own runtime
    # requirements are installed explicitly.
    "$PYTHON" -m pip install --quiet --force-reinstall --no-deps "$cached" ||
        die "pip could not install $cached."
    "$PYTHON" -m pip install --quiet "cloudpickle" "psutil" "pyyaml" "packaging" ||
        die "could not install Horovod's runtime requirements."

    if ! horovod_imports; then
        "$PYTHON" -c "import horovod.tensorflow" >&2 || true
        die "Horovod installed but 'import horovod.tensorflow' fails (see above). Delete $wheel_dir and rerun."
    fi
    say "done: horovod $HOROVOD_VERSION with TensorFlow $TF_VERSION and Gloo; launch with 'horovodrun -np N -H localhost:N opt-train train --config ...'."
}

main "$@"
