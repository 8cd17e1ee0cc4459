"""A correct Appendix E module in NumPy that writes to standard output, as leftover debugging
and training scripts do: a banner at import, logging configured to ``sys.stdout``, a ``print``
and a raw write to file descriptor 1 in ``forward``. Standard output carries the protocol's
replies ([proto.framing]), so the glue must send all of it to standard error; ``tests/wild.rs``
asserts the module is graded like the quiet one.
"""

import logging
import os
import sys

from appendix_e_fakes import Correct

print("loaded FIRE module v0.3")
logging.basicConfig(stream=sys.stdout, level=logging.INFO)
log = logging.getLogger("fire")


class Noisy(Correct):
    def __call__(self, x):
        print("FIRE input", x.shape)
        log.info("computing FIRE bias for T=%d", x.shape[2])
        os.write(1, b"a C extension writes here\n")
        return super().__call__(x)
