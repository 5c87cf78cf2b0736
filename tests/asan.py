"""A C extension of tidings built with AddressSanitizer and UBSan, and a long test of the same file
run against it in a child Python (libasan preloaded; CPython's own allocations are not
leak-checked), and the test module's side: `sanitized` loads that build in the child. Used by the
soak-marked tests of every .c file of tidings."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import pytest


def run_under_asan(tmp_path: Path, source: str, env_var: str, test_id: str) -> None:
    """Build `source` (a .c file) sanitized into `tmp_path`, then run pytest's `test_id` in a child
    with `env_var` naming the built module (the test module loads it from there) and TIDINGS_SOAK=1;
    skipped where gcc has no AddressSanitizer."""
    gcc = shutil.which("gcc")
    libasan = subprocess.run([gcc or "gcc", "-print-file-name=libasan.so"], capture_output=True, text=True,
                             check=False).stdout.strip() if gcc else ""
    if not gcc or not os.path.isabs(libasan):
        pytest.skip("no gcc with AddressSanitizer here")
    name = os.path.splitext(os.path.basename(source))[0]
    built = str(tmp_path / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}")
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover",
                    "-fno-omit-frame-pointer", f"-I{sysconfig.get_paths()['include']}", source, "-o", built],
                   check=True, timeout=120)
    env = {**os.environ, "LD_PRELOAD": libasan, "ASAN_OPTIONS": "detect_leaks=0", "TIDINGS_SOAK": "1",
           env_var: built}
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_id],
                           env=env, capture_output=True, text=True, timeout=1800, check=False)
    assert child.returncode == 0, child.stdout[-3000:] + child.stderr[-3000:]


def sanitized(env_var: str, name: str) -> ModuleType | None:
    """In the child `run_under_asan` starts (where `env_var` names the build): the sanitized module
    `name`, for the test module to put in place of the compiled one; None in any other run."""
    path = os.environ.get(env_var)
    if not path:
        return None
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
