"""The module imported afresh: whether its bias depends on what ran before it in the program.

The glue's step and twin (``steps``) show what a module keeps in itself between calls. What a
program keeps outside the module — a dict at module level, a class attribute, a cache on a
function of the length — the twin shares, being built from the same imported class, so a
normaliser or bias cached there under the length alone fails its cases with values no catalogued
mistake explains. Where a graded bias is not the twin's and not clearly the case's, the glues
import the module's file once more (a new namespace: its globals and classes made again, as in a
new process), build the module from that class holding the case's values and call it once
(``Fresh.check``): a bias that is then the case's, where the graded one is not, is what the
earlier calls left behind (``StaleBias``). Once fresh modules return the graded bias itself, the
module's bias does not depend on its history, and the check stops.
"""

from fire_conformance import numpy_fire
from fire_conformance import steps
from fire_conformance.repeats import StaleBias

# Fresh biases equal to the graded one after which the check stops.
ENOUGH = 2


class Fresh:
    """The check over one run; ``reload()`` imports the module's file afresh and returns the
    class (None: no file to import again, no check)."""

    def __init__(self, reload):
        self.reload = reload
        self.alike = 0 if reload is not None else ENOUGH

    def check(self, case, got, fresh_bias, dtype):
        """Raises ``StaleBias`` where the graded bias ``got`` (``[H, queries, keys]``) is far from
        the case's (beyond rounding, ``steps.twin_differs``) and the bias of a module built from
        the class imported afresh (``fresh_bias(cls)``, the same shape) is the case's:
        ``steps.NEARER`` times nearer it, as the twin's verdict is decided. A module that cannot be imported, built or called again
        tells nothing, and is not tried again."""
        if self.alike >= ENOUGH:
            return
        try:
            fresh = fresh_bias(self.reload())
        except (Exception, SystemExit):  # `command_line.load_class` exits on a file gone
            self.alike = ENOUGH
            return
        if not steps.twin_differs(got, fresh, dtype):
            self.alike += 1
            return
        reference = numpy_fire.reference(case)
        if reference is None:
            return
        d_got, d_fresh = steps.distances(got, fresh, reference, case.queries, case.keys)
        if d_fresh * steps.NEARER < d_got and steps.twin_differs(got, reference, dtype):
            raise StaleBias(
                "imported afresh and built holding the case's values, the module returns the "
                "case's bias on its first call; after the glue's earlier calls (its training "
                "step, earlier cases) it returns another, which a module built anew from the "
                "same import returns too: it keeps something computed from earlier parameters "
                "outside the module, between calls (a dict at module level or a class attribute "
                "keyed on the length alone: a normaliser, ψ table or bias), so in training every "
                "step after the first uses stale values; recompute it, or keep it on the "
                "instance keyed on everything it depends on [fire.bias]")
