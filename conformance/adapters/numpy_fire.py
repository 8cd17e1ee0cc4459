"""Repository shim: the code is `fire_conformance.numpy_fire` in conformance/python/ (the pip package,
`pip install ./conformance`). Importing this file, or running it as a script, uses that module
from this clone, so the repository's own tests and commands need no install."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from fire_conformance import numpy_fire as _module  # noqa: E402

if __name__ == "__main__":
    sys.exit(_module.main())
sys.modules[__name__] = _module
