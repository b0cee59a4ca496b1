"""``python3 -m onnx_rewrite ARGS...``: the ``onnx-rewrite`` command line (docs/cli.md), run by the
tool's own code compiled into the extension, so that it is there however the package was
installed (pip, ``cmake --install``, the .deb) and gives the tool's output and exit codes.
"""

import os
import sys
from typing import List, Optional

from . import _core


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the command line with ``argv`` (default ``sys.argv[1:]``); returns its exit code."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    # What Python buffered goes out before the tool writes to the same descriptors.
    sys.stdout.flush()
    sys.stderr.flush()
    return _core.run_cli([b"onnx-rewrite"] + [os.fsencode(argument) for argument in arguments])


if __name__ == "__main__":
    sys.exit(main())
