"""Repository shim: the code is `fire_conformance.kit` in conformance/python/ (the pip package,
`pip install ./conformance`). Importing this file uses that module
from this clone, so the repository's own tests and commands need no install."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from fire_conformance import kit as _module  # noqa: E402

sys.modules[__name__] = _module
