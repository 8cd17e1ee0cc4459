"""``python -m fire_conformance ARGS``: the ``fire-conformance`` binary with ``ARGS``."""

import os
import subprocess
import sys

from fire_conformance import BinaryNotFound, binary


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        exe = binary()
    except BinaryNotFound as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if os.name == "posix":
        sys.stdout.flush()
        os.execv(exe, [exe] + argv)
    return subprocess.call([exe] + argv)


if __name__ == "__main__":
    sys.exit(main())
