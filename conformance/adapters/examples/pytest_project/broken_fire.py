"""``my_fire.FIRE`` with one deliberate mistake: positions counted from 1 (the paper's statement
read literally) instead of Appendix E's 0. ``pytest --fire-impl broken_fire.py:FIRE`` fails, and
each failure names the mistake: ``diagnosis: matches variant `one-based-positions` ...``."""

import numpy as np

from my_fire import FIRE as Correct


class FIRE(Correct):
    def positions(self, seq_len):
        return np.arange(1, seq_len + 1, dtype=self.dt)
