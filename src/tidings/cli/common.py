"""What every `tidings` subcommand shares: exit codes, the error that carries one, JSON output.

Kept apart from cli/main.py so that subcommand modules can import it: main.py also runs as
`python -m tidings.cli.main`, and a subcommand importing it from there would get a second copy
of the module, whose CliError the running `main` would not catch.
"""

from __future__ import annotations

import json
import sys
from typing import Any

EXIT_BROKER, EXIT_INPUT, EXIT_UNREACHABLE, EXIT_TIMEOUT = 1, 2, 3, 4
CREDENTIAL_ENV = "TIDINGS_CREDENTIAL"  # the default of every --credential


class CliError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.exit_code = code


def emit(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n")
    sys.stdout.flush()
