"""Whether Spark can start here: PySpark installed and a Java 17 or newer to run its JVM.

PySpark starts `$JAVA_HOME/bin/java` when JAVA_HOME is set, else the `java` on the PATH; without
one it fails with a long traceback out of py4j. A program with optional Spark steps asks
`spark_problem()` first and prints its one line instead.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

JAVA_MAJOR_MIN = 17
JAVA_VERSION_S_MAX = 30.0
MISSING = "Java 17 not found: Spark steps skipped, install a JDK"


def java_path() -> str | None:
    """The java PySpark would start: JAVA_HOME's, else the PATH's."""
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").is_file():
        return str(Path(home, "bin", "java"))
    return shutil.which("java")


def java_major(version_output: str) -> int | None:
    """The major version in `java -version`'s output ('openjdk version "17.0.15"' -> 17, "1.8.0" -> 8)."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if found is None:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def spark_problem() -> str | None:
    """One line saying why the Spark steps cannot run here, or None when they can."""
    if importlib.util.find_spec("pyspark") is None:
        return "PySpark not installed: Spark steps skipped, pip install 'tidings[spark]'"
    java = java_path()
    if java is None:
        return MISSING
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=JAVA_VERSION_S_MAX,
                             check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{MISSING} ({java} did not run: {exc})"
    major = java_major(out.stderr + out.stdout)
    if major is None or major < JAVA_MAJOR_MIN:
        return f"{MISSING} ({java} is version {major if major is not None else 'unknown'})"
    return None
