"""Fixtures of the training tests: a small file system to fill or mount read-only."""

import subprocess

import pytest



@pytest.fixture
def tmpfs():
    """`mount(path, size="1m", *options)`: a tmpfs at `path` (made here), unmounted after the test; skips where none can be."""
    mounted = []

    def mount(path, size="1m", *options):
        path.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join((f"size={size}", *options)), "tmpfs", str(path)],
                              capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)
