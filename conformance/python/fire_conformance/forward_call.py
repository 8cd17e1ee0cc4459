"""How the Appendix E glue calls a torch or NumPy module's ``forward``: in the call style its
signature says (or ``--call`` forces), the x layouts in turn where it reads the length from an
``x``, and with the probes of that style — the same call again, positions counted, a probe x,
a decoding step, attention scores — so that a mistake shown only there is caught rather than
answered by the glue's gather [proto.hello]. ``appendix_e``'s module docstring lists the
styles; ``calls`` plans each, ``decoding`` and ``logits`` hold their checks.
"""

import contextlib

import numpy as np

from fire_conformance import calls
from fire_conformance import decoding
from fire_conformance import kit as fire_kit
from fire_conformance import logits
from fire_conformance import steps
from fire_conformance.calls import X_LAYOUTS, call_style
from fire_conformance.dtypes import TORCH_DTYPES
from fire_conformance.outputs import NotABias, as_numpy, every_layout_failed, remembered_layout_failed, squeeze

try:
    import torch
except ImportError:  # the glue still serves NumPy modules
    torch = None

# What a layout of x the module does not take raises (an ``assert x.dim() == 3`` included).
LAYOUT_ERRORS = (ValueError, RuntimeError, TypeError, IndexError, AssertionError)



class ForwardCall:
    """The glue's calls of its module, for ``appendix_e.Glue``: reads ``call`` (``--call``),
    ``dtype``, ``max_len``, ``query_rows`` and keeps ``layout``, the x layout that gave a bias
    of the right length where the layouts disagree (tried first from then on)."""

    def forward(self, m, heads, case, torch_module, probes=True):
        """The module's bias over what it was asked: (``[H, R, C]`` array-like, the
        ``calls.Plan`` saying where the case's queries and keys are in it); ``probes``: with the
        glue's probe calls and checks of the call style (the graded call, not the twin's)."""
        style = self.call or call_style(m)
        if torch_module:
            dt = getattr(torch, TORCH_DTYPES[self.dtype])
            dev = next(m.parameters()).device
            tensor = lambda v: torch.as_tensor(v, device=dev)  # noqa: E731
            array = lambda a: torch.as_tensor(a, device=dev).to(dt)  # noqa: E731
            zeros = lambda shape: torch.zeros(shape, dtype=dt, device=dev)  # noqa: E731
            token_zeros = lambda shape: torch.zeros(shape, dtype=torch.long, device=dev)  # noqa: E731
            mask_ones = lambda shape: torch.ones(shape, dtype=torch.long, device=dev)  # noqa: E731
        else:
            # NumPy has no bfloat16: a NumPy module asked for bf16 computes in float32.
            dev, dt = "cpu", np.float64 if self.dtype == "f64" else np.float32
            tensor = np.asarray
            array = lambda a: np.asarray(a, dtype=dt)  # noqa: E731
            zeros = lambda shape: np.zeros(shape, dtype=dt)  # noqa: E731
            token_zeros = lambda shape: np.zeros(shape, dtype=np.int64)  # noqa: E731
            mask_ones = lambda shape: np.ones(shape, dtype=np.int64)  # noqa: E731
        # Token ids stay integers; every other x is in the dtype asked.
        x_of = lambda style, a: tensor(a) if style == "ids" else array(a)  # noqa: E731

        def call(style):
            p = calls.plan(style, case, self.max_len, self.query_rows)
            rows, cols = p.shape
            x = p.x_shape(heads)

            def invoke():
                if style == "mask":
                    return m(mask_ones(x))
                if x is not None:
                    return m(token_zeros(x) if style == "ids" else zeros(x))
                if style in ("seq_len_device", "lengths_device"):
                    return m(*p.args, dev)
                if style in ("seq_len", "lengths"):
                    return m(*p.args)
                if style == "position_ids":
                    return m(tensor(p.args[0])[None])
                if style == "qk_states":
                    return m(*(zeros(shape) for shape in p.states(heads)))
                return m(*(tensor(a) for a in p.args))

            try:
                out = invoke()
            except (RuntimeError, TypeError) as e:
                text = str(e)
                if torch_module and any(w in text for w in ("Double", "Float", "dtype", "scalar type")):
                    raise fire_kit.UnsupportedDtype(f"the module cannot compute in {self.dtype} ({type(e).__name__}: "
                                        f"{text.splitlines()[0]}); rerun with the --dtype it computes in")
                if style in calls.LENGTH_STYLES and not self.call:
                    raise calls.as_lengths_failed(style, calls.parameter_names(m), e) from e
                raise
            except (AttributeError, IndexError, ValueError) as e:
                if style in calls.LENGTH_STYLES and not self.call:
                    raise calls.as_lengths_failed(style, calls.parameter_names(m), e) from e
                raise
            full = squeeze(out, heads, rows, cols, batch=p.batch)
            if style in calls.DECODING_STYLES and self.query_rows == "last" and rows < cols:
                if style == "qk_states":
                    keys = zeros(p.states(heads)[1])
                    square = squeeze(m(keys, keys), heads, cols, cols, batch=p.batch)
                else:
                    square = squeeze(m(cols, cols, dev) if style == "lengths_device" else m(cols, cols),
                                     heads, cols, cols)
                decoding.check_last_rows(as_numpy(full), as_numpy(square), self.dtype, style)
            if not probes:
                return full, p
            # The probes below are checks, not the graded call: no graph for them.
            probing = torch.no_grad if torch_module else contextlib.nullcontext
            if rows * cols <= steps.FULL_LIMIT:
                # The same call again first: a module that changes from call to call (a buffer
                # it advances on every forward) shows, rather than being blamed on a probe's x.
                with probing():
                    again = squeeze(invoke(), heads, rows, cols, batch=p.batch)
                steps.check_repeated(as_numpy(full), as_numpy(again), self.dtype)
            always = calls.may_read_tokens(calls.parameter_names(m), self.call, style)
            counting = calls.counted(p.args[0], always) if style in calls.POSITION_LAYOUTS else None
            if counting is not None:
                given = tensor(counting) if style == "positions" else tensor(counting)[None]
                try:
                    with probing():
                        again = as_numpy(squeeze(m(given), heads, rows, cols))
                except Exception:  # a probe past the module's own bounds tells nothing
                    again = None
                if again is not None:
                    calls.check_positions_used(as_numpy(full), again, list(p.args[0]), counting)
            if style in calls.VALUE_FREE:
                probe = calls.probe_for(style, x)
                with probing():
                    probed = m(x_of(style, probe))
                calls.check_x(as_numpy(full), as_numpy(squeeze(probed, heads, rows, cols, batch=p.batch)),
                              probe, self.dtype)
                if p.batch > 1:
                    varied = calls.probe_for(style, x, varied=True)
                    with probing():
                        probed = m(x_of(style, varied))
                    if hasattr(probed, "shape"):
                        calls.check_x_varied(as_numpy(full), as_numpy(probed), varied, heads, self.dtype)
            past = decoding.past_name(m)
            if past is not None and style in decoding.PAST_LAYOUTS and rows == cols and rows >= 2 \
                    and rows * cols <= steps.FULL_LIMIT:
                # The decoding calls a cache makes (`decoding.cached_lengths`): the square's
                # last half as new tokens (a prefill), and its last token alone.
                for before in decoding.cached_lengths(rows):
                    shape = decoding.with_length(x, style, rows - before)
                    given = mask_ones(shape) if style == "mask" else \
                        token_zeros(shape) if style == "ids" else zeros(shape)
                    with probing():
                        raw = m(given, **{past: before})
                    try:
                        decoded = as_numpy(squeeze(raw, heads, rows - before, cols, batch=p.batch))
                    except Exception:  # its shape is not a bias of the new rows over every key
                        decoded = None
                    decoding.check_past(decoded, as_numpy(full), before, past, self.dtype,
                                        list(getattr(raw, "shape", [])) or None)
            if style == "qk_states":
                q, k = logits.states_probe(*p.states(heads))
                with probing():
                    probed = m(array(q), array(k))
                logits.check_states(as_numpy(full), as_numpy(probed), q, k, self.dtype)
            if style in calls.SCORES_STYLES:
                scores = array(logits.scores_probe(x))
                # A copy: a module adding its bias in place (`scores += bias`, as T5 does)
                # changes what it is given, not what its output is checked against.
                with probing():
                    probed = m(scores.clone() if torch_module else scores.copy())
                named = style == "scores" and calls.takes_scores(calls.parameter_names(m))
                logits.check_scores(full, probed, scores, self.dtype, named, to_numpy=as_numpy)
            return full, p

        if style == "positions" and self.layout == "ids":
            # Read as token ids on an earlier case (``calls.reads_tokens``).
            case.note(calls.token_note(calls.parameter_names(m)[0]))
            return call("ids")
        if style == "positions":
            layouts = calls.POSITION_LAYOUTS
        elif style != "x" or self.call:
            try:
                return call(style)
            except LAYOUT_ERRORS as e:
                raise calls.past_context(style, case, self.max_len, e) or e
        elif calls.takes_scores(calls.parameter_names(m)):
            return call("scores")
        else:
            layouts = ["mask"] + X_LAYOUTS if calls.takes_mask(calls.parameter_names(m)) else X_LAYOUTS
        # The layouts in turn, the one that worked before first.
        order = sorted(layouts, key=lambda s: s != self.layout)
        errors = []
        for layout in order:
            try:
                out = call(layout)
            except calls.PositionsIgnored as e:
                names = calls.parameter_names(m)
                if not calls.reads_tokens(names, self.call, self.layout, errors, e):
                    raise
                self.layout = "ids"
                case.note(calls.token_note(names[0]))
                return call("ids")
            except (NotABias, fire_kit.Mistake):
                raise
            except LAYOUT_ERRORS as e:
                beyond = calls.past_context(layout, case, self.max_len, e)
                if beyond is not None:
                    raise beyond from e
                if isinstance(e, calls.XAdded):
                    # x is the module's attention scores: whatever layout was remembered.
                    self.layout = None
                elif layout == self.layout:
                    raise remembered_layout_failed(layout, e, case.length)
                errors.append((layout, e))
                continue
            # Remembered only once the probes ran: without them a module adding x to its bias
            # passes in the first layout (x of zeros) and would keep it (the step's and the
            # twin's calls come before the graded one).
            if case.length != heads and probes:
                self.layout = layout
            return out
        raise every_layout_failed(errors)

