"""Ready-made glue for FIRE modules shaped like the paper's Appendix E.

Such a module is constructed as ``Class(num_heads, mlp_width, init_c, init_L, eps)``, holds the
parameters ``mlp.0.weight``, ``mlp.0.bias``, ``mlp.2.weight``, ``mlp.2.bias``, ``c``, ``init_L``,
``L_multiplier``, and returns the bias of the positions ``0..T-1``. Point the harness at yours:

    fire-conformance run --impl "fire-conformance-appendix-e path/to/model.py:FIRE"
    fire-conformance run --impl "python3 -m fire_conformance.appendix_e path/to/model.py:FIRE"
    pytest --fire-impl path/to/model.py:FIRE

A Flax/JAX module of the same shape (``init``/``apply``) is handed to ``fire_conformance.jax_glue``.

How the module is called is found by introspecting its ``forward`` (or ``__call__``), or forced
with ``--call``. A ``forward(x)`` found by introspection is called with the ``x`` layout first and,
when that fails or returns a bias of another length, with ``hidden``, ``scores``, ``ids``, then
``sequence``: which
dimension of ``x`` a module reads the length from is its calling convention, not a FIRE mistake,
and the values are checked in full either way. A first parameter named for attention scores
(``scores``, ``attn_logits``, ``sim``, ...) gets the ``scores`` layout only. Each style hands the
module as much of the case's positions as it can take (``calls``), so that a mistake shown only
there is caught rather than answered by the glue's gather [proto.hello]:

    x          forward(x), x of shape [B, H, T, 1]; the length is read from x (Appendix E)
    hidden     forward(x), x of shape [B, T, 1]: hidden states [batch, seq, dim], the length
               read from x.size(1) (GPT-style copies of Appendix E)
    scores     forward(x), x attention scores [B, H, T, T]: called with zero scores and again
               with random ones, it must return scores + bias, or (a module reading only the
               length from x.size(-1), its parameter not named for scores) the bias alone
    scores_shape  forward(x), x attention scores [B, H, T, T] read only for their shape, the
               bias returned alone for the caller to add (given only with --call: a parameter
               named for scores is otherwise held to return scores + bias)
    ids        forward(idx), idx a batch of token ids [B, T] of integers (nanoGPT's), the
               length read from it; a ``forward(idx)`` or ``forward(indices)`` that takes no
               list of positions [n] and reads a [1, n] only for its count is called so, and
               the run's note says it (--call positions grades it as positions instead)
    mask       forward(attention_mask), a padding mask [B, T] of ones, every token there (also
               ``attn_mask``, ``padding_mask``, ``mask``): Hugging Face code makes the positions
               from it (``attention_mask.long().cumsum(-1) - 1``); tried first for a parameter
               so named, then the other layouts (an additive mask [B, 1, T, T] is ``scores``)
    sequence   forward(x), x one sequence of hidden states [T, 1], no batch: the length read
               from x.shape[0] (Equinox's convention, a module vmapped over the batch)
    seq_len    forward(T)                 (also ``seq_length``, ``length``, ``n``, ...)
    seq_len_device  forward(T, device)
    lengths    forward(query_length, key_length): the decoding call, the rows from the case's
               first query to its last key over keys 0..T-1, forward(T - first, T)
               (x-transformers' ``forward(i, j)``, Hugging Face's ``compute_bias
               (query_length, key_length)``; also ``q_len, k_len``, ...); with
               ``--query-rows first`` (T5's compute_bias, whose caller slices) the first rows,
               forward(last + 1, T)
    lengths_device  the same with a third parameter ``device``
    qk_states  forward(q, k), the attention's query and key tensors [B, H, n, 1] and [B, H, T, 1]
               of zeros (also ``query, key``, ``query_states, key_states``, ...): the decoding
               call as for ``lengths``, its lengths read from the tensors (a module computing
               scores q·kᵀ + bias returns the bias for them)
    positions  forward(positions): the case's positions where its queries are its keys, else
               the queries followed by the keys, unsorted and repeated as they are; the rows
               and columns picked from that
    qk         forward(query_positions, key_positions): the requested rows and columns directly
A forward that also takes the cache's length as a keyword (``past_key_values_length``,
``start_pos``, ... ``calls.PAST_NAMES``) is called once more in its x layout as a decoding step,
the square's last half as new tokens after the first half, and must return the square's last
rows over every key (``decoding.check_past``).
In the x layouts B is 2 for squares up to 512 and 1 beyond: a module returning [B, H, T, T] must
give both sequences the same bias (a batch mixed up with the heads fails); [H, T, T] and
[1, H, T, T] do not look at B.

Outputs ``[H, T, T]``, ``[1, H, T, T]`` and ``[B, H, T, T]`` (every batch entry equal, else an
error naming the mix-up) are accepted; anything else is a clear error naming the shape.

A torch module with more hidden layers (Appendix B's approximator has two: ``mlp.0``, ``mlp.2``,
``mlp.4``, ReLU between) is graded on the cases of its own depth; a case whose MLP the module
does not have is skipped with both architectures named. (A NumPy module cannot say its depth and
gets Appendix E's one hidden layer only.)

A torch module's state need not be Appendix E's exactly (``load_torch``): the case's MLP layers go,
in order, to the module's ``mlp.N`` layers, else its ``nn.Linear`` layers, else its parameters
whose names say they are weights (``W1``, ``w_in``, ``fc2_weight``: ``fire_conformance.hand_written``;
kept ``[in, out]`` for ``z @ W`` where only that composes), so a layer built with
``bias=False`` or a dropped activation is graded (and named) rather than refused (a bias kept as a
parameter of its own beside a bias-free layer, as long as its output, is that layer's); scalars kept as
``[1]`` take the case's values; buffers the case has no value for keep the constructor's; a
parameter no case value reaches is refused by name. ``--dtype bf16`` casts it to ``bfloat16``
(every dtype likewise, unless the module is built with floating parameters of several dtypes, a
float16 MLP say: that precision is the module's, and graded as built).
What the module writes to standard output goes to standard error: the protocol owns stdout.

Options (after the module spec):
    --map OURS=THEIRS   rename a parameter (repeatable), e.g. --map L_multiplier=L_mult
    --dtype f32|f64|bf16  the dtype your module computes in (default f32; selects the tolerance)
    --call STYLE        how to call forward (see above; default: introspection)
    --future-keys X     mirrored (Appendix E, default), zero, masked (-inf or any value <= -1e3,
                        e.g. finfo.min) or negated (nothing checked above the diagonal)
    --max-len N         the module's context: a case needing a T x T square with T > N, or a
                        position >= N in a list of positions, skips (default: squares up to
                        4096, lists of positions of any value)
    --query-rows last|first  which rows forward(query_length, key_length) returns when there
                        are fewer queries than keys (default last: the new queries of a decoding
                        step)
    --kwargs JSON       extra constructor keyword arguments; init_c, init_L or eps there
                        replace the constructor's default in the [fire.defaults] cases
                        (the case's value is passed everywhere else)
    --map-arg OURS=YOURS  the constructor's name for one of Appendix E's arguments (repeatable),
                        e.g. --map-arg num_heads=n_heads; a constructor that takes no init_c,
                        init_L or eps is built without them (c and L_init loaded over what it
                        makes; cases at an ε other than the spec's 1e-6 skipped); for a
                        constructor taking one config object (``__init__(self, config)``),
                        the config attribute that holds it (``configs``)

At the spec's initial values a torch module is built on its own defaults, which are checked; on
every other case it is built with the case's ``init_c`` and ``init_L`` and must hold them before
the case's values are loaded over its scalars: a constructor that ignores one fails, naming it.

With torch installed the module is a torch ``nn.Module`` (put in ``.eval()`` mode) and gradients
(``fire-grad/``) come from autograd, compared on small squares with ``.train()`` mode's
(``train_mode``); without torch, a NumPy module with the same interface
(``load_state_dict`` taking arrays) works for bias cases.
"""

import math

import numpy as np

from fire_conformance import calls
from fire_conformance import fresh
from fire_conformance import kit as fire_kit
from fire_conformance import long_length, numpy_fire, repeats, steps, train_mode
from fire_conformance.command_line import is_jax_module, load_class, parse_map, parser
from fire_conformance.dtypes import TORCH_DTYPES, dtype_name, rerun_advice, wider_than_bf16
from fire_conformance.forward_call import ForwardCall
from fire_conformance.outputs import as_numpy, numpy_output
from fire_conformance.construction import (
    SCALARS, at_defaults, from_options, construct_own, construct, default_eps_note)
from fire_conformance.held import check_arguments, check_f_theta_start, same_in_f32
from fire_conformance.loading import (
    Built, appendix_params, assign, effective_state, is_our_name, load_torch, materialise,
    parametrized, reading, trainable)

try:
    import torch
except ImportError:  # the glue still serves NumPy modules
    torch = None



class Glue(ForwardCall):
    def __init__(self, cls, mapping, dtype, max_len, kwargs, call, query_rows="last", reload=None):
        # `kwargs`: the constructor's `construction.Arguments` besides the case's.
        self.cls, self.mapping, self.dtype, self.max_len, self.kwargs = cls, mapping, dtype, max_len, kwargs
        self.long_unchecked = True
        # The module under torch.inference_mode() is checked once per run (`steps.check_inference`).
        self.inference_unchecked = True
        self.call, self.query_rows = call, query_rows
        # The module's file imported afresh where a bias may depend on earlier calls (`fresh`).
        self.fresh = fresh.Fresh(reload)
        # The x layout that gave a bias of the right length where the layouts disagree
        # (T != H): tried first from then on.
        self.layout = None
        # This case's train-mode bias in the glue's training step (`steps.step`, `stale`).
        self.first = None
        # Whether this case's module was built on its own defaults (`constructed`, `twin`).
        self.own = False
        # The forward hook of this case's module (`repeats`), removed when the next begins.
        self.hook = None
        # What the module returned for earlier cases (`repeats`).
        self.repeats = repeats.Repeats()

    def torch_class(self):
        return torch is not None and isinstance(self.cls, type) and issubclass(self.cls, torch.nn.Module)

    def params(self, enc):
        # Any depth for a torch module, whose own layers say which cases it can take
        # (`module`); a NumPy module says nothing of its depth, so it gets Appendix E's only.
        any_depth = torch is not None and isinstance(self.cls, type) and issubclass(self.cls, torch.nn.Module)
        return appendix_params(enc, any_depth=any_depth)

    def constructed(self, case, init_c=None, init_L=None):
        """The module for ``case`` as constructed, and whether it was built on its own defaults
        (``own``); ``init_c`` or ``init_L`` builds it with that value in place of the case's
        (``twin``)."""
        enc = case.encoding if init_c is None else {**case.encoding, "c": init_c}
        enc = enc if init_L is None else {**enc, "l_init": init_L}
        heads, width, _ = self.params(case.encoding)
        # At the spec's defaults a torch module is built on its own: c, L_init and ε from its
        # constructor's defaults, c and the multiplier as it initialises them, so that a
        # module whose defaults are not [fire.defaults]' (a multiplier starting at 0.5, ε of
        # 1e-3) fails those cases rather than having them overwritten with the right values.
        # A factory function (``make_fire(num_heads=…)``) given for CLASS is built on its
        # defaults too, where what it returns is a torch module. Compared with None, never
        # tested for truth: a torch.compile wrapper forwards ``len()`` to a module without one.
        factory = torch is not None and not isinstance(self.cls, type)
        own = None
        if init_c is None and init_L is None and at_defaults(enc) and (self.torch_class() or factory):
            own = construct_own(self.cls, heads, width, self.kwargs, enc)
            if own is not None and not isinstance(own, torch.nn.Module):
                own = None
        if own is not None:
            case.note(default_eps_note(self.cls, self.kwargs))
            return own, True
        return construct(self.cls, heads, width, enc, self.kwargs), False

    def loaded(self, m, case, own, dt, check=True):
        """Loads the case's values into the torch module ``m`` (``load_torch``): on a module built
        from the case's c and L_init, first checking (``check``) that it holds them; on one built
        on its own defaults, keeping the scalars it made that are not the spec's. Returns the
        names, ours by theirs."""
        enc = case.encoding
        heads, width, ours = self.params(enc)
        initial = {k: v.clone() for k, v in effective_state(m).items()}
        names = load_torch(m, ours, self.mapping, dt, Built(self.cls, heads, width, self.kwargs))
        case.note(reading(names, ours, transposed=names.transposed))
        self.kwargs.check_reached(self.cls, names.values(), enc)
        if not own and check:
            # Built from the case's c and L_init: it must hold them ([fire.params]).
            theirs = {k: n for n, k in names.items()}

            def rebuild(name, arg, value):
                key = {"init_c": "c", "init_L": "l_init"}[arg]
                again = construct(self.cls, heads, width, {**enc, key: value}, self.kwargs)
                return effective_state(in_dtype(again, dt))[theirs[name]]

            check_arguments({k: initial[n] for n, k in names.items() if n in initial}, case, self.dtype,
                            rebuild, self.kwargs.untaken(self.cls),
                            lambda arg: self.kwargs.given_as(self.cls, arg))
        elif own:
            check_f_theta_start({k: initial[n] for n, k in names.items() if n in initial})
            # The MLP as the case has it (its initialisation is random), the scalars as
            # the module made them where they are not the default: one made in float32 and
            # cast (c = 0.1 is not exact there) takes the case's exact value.
            wrong = {n: initial[n] for n, k in names.items()
                     if k in SCALARS and not same_in_f32(initial[n], ours[k])}
            assign(m, wrong)
        return names

    def module(self, case):
        heads, width, ours = self.params(case.encoding)
        m, own = self.constructed(case)
        self.own = own
        if torch is not None and isinstance(m, torch.nn.Module):
            # The whole module in the dtype asked, bf16 included: a bf16 module computes and
            # returns bfloat16, graded by the bf16 profile [num.profiles].
            dt = getattr(torch, TORCH_DTYPES[self.dtype])
            m = in_dtype(m, dt)
            materialise(m)
            # Every call from here on, the probes' included (`repeats`); a module that takes no
            # hooks (a TorchScript module) is graded without that record.
            self.repeats.start(case.id, ours, case.encoding)
            # The previous case's hook off first: a factory may return one instance for every
            # case, which would otherwise record each call once per case so far.
            if self.hook is not None:
                self.hook.remove()
                self.hook = None
            try:
                self.hook = m.register_forward_hook(self.repeats.hook)
            except RuntimeError:
                pass
            names = self.loaded(m, case, own, dt)
            # What training does before the graded call (`steps.step`); its bias, for `stale`.
            self.first, second, changed = steps.step(m, lambda: self.forward(m, heads, case, True, probes=False)[0],
                                                     full=case.length ** 2 <= steps.FULL_LIMIT)
            self.repeats.loaded(changed)
            if second is not None:
                raise second
            m.eval()
        else:
            # NumPy has no bfloat16: a NumPy module asked for bf16 computes in float32.
            dt = np.float64 if self.dtype == "f64" else np.float32
            names = {self.mapping.get(k, k): k for k in ours}
            self.kwargs.check_reached(self.cls, names.values(), case.encoding)
            m.load_state_dict({k: np.asarray(ours[v], dtype=dt) for k, v in names.items()})
        return m, heads, names, ours

    def built_again(self, case, heads, dt, **other):
        """The bias of the module built for ``case`` again, with ``other`` (``init_c`` or
        ``init_L``) in place of the case's, loaded with its values and called once; None where
        it cannot be built or called (which tells nothing)."""
        try:
            m, own = self.constructed(case, **other)
            m = in_dtype(m, dt)
            materialise(m)
            self.loaded(m, case, own, dt, check=False)
            m.eval()
            with torch.no_grad():
                again, _ = self.forward(m, heads, case, True, probes=False)
        except Exception:
            return None
        return again

    def twin(self, case, full, plan, heads, names):
        """Raises where a module built anew and loaded with the case's values returns another
        bias than ``full`` (``steps.twin_mistake``): built with another ``init_c`` where the
        glue passes the case's; and where one built with another ``init_L`` returns the same
        though no parameter or buffer holds it (``names``, what was loaded), so the constructor
        is its only way in: it keeps a threshold of its own (``IgnoredArgument``). Only on
        squares up to ``steps.FULL_LIMIT``."""
        rows, cols = plan.shape
        if rows * cols > steps.FULL_LIMIT:
            return
        dt = getattr(torch, TORCH_DTYPES[self.dtype])
        c = float(case.encoding["c"])
        other = None if self.own else (c * 1.5 if c != 0 else 0.25)
        twin = self.built_again(case, heads, dt, init_c=other)
        if twin is None:
            return
        got, twin = plan.pick(as_numpy(full)), plan.pick(as_numpy(twin))
        if steps.twin_differs(got, twin, self.dtype):
            reference = numpy_fire.reference(case)
            if reference is not None:
                raise steps.twin_mistake(got, twin, reference, case.queries, case.keys, other)
        self.keeps_own_threshold(case, got, plan, heads, dt, names)
        self.fresh.check(case, got, lambda cls: plan.pick(as_numpy(self.anew(cls, case, heads, dt))),
                         self.dtype)

    def keeps_own_threshold(self, case, got, plan, heads, dt, names):
        """Raises ``IgnoredArgument`` where the constructor takes ``init_L``, nothing the glue
        loads holds it (a float attribute), and the module built with an ``init_L`` that moves
        the threshold L = |m·L_init| past every position returns the case's bias ``got``
        unchanged: its threshold is its own, whatever it is given [fire.params]."""
        if self.own or "init_L" in names.values():
            return

        def built_with(l_init):
            again = self.built_again(case, heads, dt, init_L=l_init)
            return None if again is None else plan.pick(as_numpy(again))

        steps.check_own_threshold(case, got, built_with, self.dtype, self.kwargs.untaken(self.cls),
                                  self.kwargs.given_as(self.cls, "init_L"))

    def anew(self, cls, case, heads, dt):
        """The bias of a module of ``cls`` (the class imported afresh, ``fresh``) built for
        ``case`` as the graded one was, holding its values, called once."""
        saved, self.cls = self.cls, cls
        try:
            m, own = self.constructed(case)
            m = in_dtype(m, dt)
            materialise(m)
            self.loaded(m, case, own, dt, check=False)
            m.eval()
            with torch.no_grad():
                return self.forward(m, heads, case, True, probes=False)[0]
        finally:
            self.cls = saved

    def without_history(self, m, heads, case, full=None):
        """Whether the bias ``full`` (``m``'s, called again where None) is what a module with no
        history returns: one built from the class imported afresh (``fresh``; the class itself
        where there is no file to import again), holding the case's values, on its first call.
        Then a repeat of an earlier tensor is not a cache but a bias that does not move with
        what changed (a mistake saturating f_θ's input or output, which makes it deaf to c and
        m), and the case is graded on its values; not a torch module, or not built or called
        again: False."""
        if torch is None or not isinstance(m, torch.nn.Module):
            return False
        dt = getattr(torch, TORCH_DTYPES[self.dtype])
        try:
            cls = self.fresh.reload() if self.fresh.reload is not None else self.cls
        except (Exception, SystemExit):  # `load_class` exits on a file gone
            cls = self.cls
        try:
            with torch.no_grad():
                if full is None:
                    full, _ = self.forward(m, heads, case, True, probes=False)
                anew = self.anew(cls, case, heads, dt)
        except Exception:
            return False
        full, anew = as_numpy(full), as_numpy(anew)
        return full.shape == anew.shape and not steps.twin_differs(full, anew, self.dtype)

    def stale(self, full):
        """Raises where the bias is exactly the one the training step returned though the step
        changed the module's parameters (``steps.step``); not for a bias of one value, or none
        finite (``repeats.digest``: zeros everywhere repeat themselves without being kept)."""
        first = self.first
        if (first is None or not isinstance(full, torch.Tensor) or first.shape != full.shape
                or repeats.digest(full) is None or not torch.equal(first, full.detach())):
            return
        raise repeats.stale_bias()

    def build(self, case):
        case.check_positions()
        if case.kind not in ("bias", "vjp"):
            raise fire_kit.Skip(f"kind `{case.kind}`: the module returns the bias only")
        m, heads, names, ours = self.module(case)
        torch_module = torch is not None and isinstance(m, torch.nn.Module)
        try:
            return self.graded(case, m, heads, names, ours, torch_module)
        except (fire_kit.Skip, MemoryError):
            raise
        except Exception as e:
            # A check failing on a call that returned a tensor kept from the training step, or
            # from an earlier case: that is why, whatever the check would say.
            earlier = self.repeats.repeated(case.queries, case.keys)
            if (earlier is not None or self.repeats.stale()) and self.without_history(m, heads, case):
                raise
            if earlier is not None:
                raise repeats.carried(earlier, "one of the module's calls for this case returned") from e
            if self.repeats.stale():
                raise repeats.stale_bias() from e
            raise

    def graded(self, case, m, heads, names, ours, torch_module):
        """The case's outputs from the module built and loaded for it (``build``)."""
        cot = None
        if case.kind == "vjp":
            if not torch_module:
                raise fire_kit.Skip("gradients need a torch module")
            frozen(m, names, case)
            cot = case.inputs["cotangent"].array()
            want = (heads, len(case.queries), len(case.keys))
            if cot.shape != want:
                raise ValueError(f"the cotangent has shape {list(cot.shape)}, the bias {list(want)}")
        views = parametrized(m) if torch_module else {}
        if torch_module and case.kind == "bias":
            with torch.no_grad():
                full, plan = self.forward(m, heads, case, True)
        elif views:
            # A parametrised tensor is computed once per forward under `parametrize.cached()`:
            # that tensor, kept for its gradient, is the one the forward reads.
            from torch.nn.utils import parametrize

            with parametrize.cached():
                computed = {n: getattr(mod, attr) for n, (mod, attr) in views.items()}
                for t in computed.values():
                    if t.requires_grad:
                        t.retain_grad()
                full, plan = self.forward(m, heads, case, torch_module)
        else:
            full, plan = self.forward(m, heads, case, torch_module)
        # A call of the graded phase that returned an earlier case's tensor, or the training
        # step's: a mistake where the bias is also clearly not this case's. An earlier case's
        # first: a cache outliving the module is the deeper cause.
        earlier = self.repeats.repeated()
        reference = numpy_fire.reference(case) if earlier is not None or self.repeats.stale() else None
        if reference is not None and repeats.clearly_differs(plan.pick(as_numpy(full)), reference,
                                                             case.queries, case.keys) \
                and not self.without_history(m, heads, case, full):
            raise repeats.carried(earlier, "the module returned") if earlier else repeats.stale_bias()
        if torch_module:
            self.stale(full)
        if torch_module and not isinstance(full, torch.Tensor):
            # A torch module handing back a NumPy array (a `.numpy()` at the end of forward):
            # its bias is graded as it is; autograd cannot reach through it, so on a gradient
            # case it is the mistake a `.detach()` is.
            if case.kind == "vjp":
                raise fire_kit.Mistake(numpy_output("autograd"))
            torch_module = False
        want_dt = (TORCH_DTYPES[self.dtype] if torch_module
                   else {"f64": "float64", "f32": "float32"}.get(self.dtype))
        got_dt = full.dtype if torch_module else np.asarray(full).dtype
        if want_dt is not None and dtype_name(got_dt) != want_dt and not wider_than_bf16(self.dtype, got_dt):
            raise fire_kit.UnsupportedDtype(f"the module returns {got_dt} but --dtype {self.dtype} was "
                                            f"given; {rerun_advice(got_dt)}")
        # The twin after the graded backward: loading the same values into parameters a twin
        # shares (a registry of modules of one shape) must not touch the graded graph.
        with_twin = torch_module and case.encoding.get("type") == "fire"
        if case.kind == "bias":
            if with_twin:
                self.twin(case, full, plan, heads, names)
                if self.inference_unchecked and plan.shape[0] * plan.shape[1] <= steps.FULL_LIMIT:
                    # Once per run: a copy of the module under torch.inference_mode().
                    self.inference_unchecked = False
                    note = steps.check_inference(
                        m, lambda module: self.forward(module, heads, case, True, probes=False)[0],
                        full, self.dtype)
                    if note is not None:
                        case.note(note)
            return plan.pick(as_numpy(full))
        if not full.requires_grad:
            raise fire_kit.Mistake("the module's output carries no autograd graph (a .detach(), torch.no_grad() "
                             "in forward, or a tensor cached from another call), so no parameter gets "
                             "a gradient and none would train [grad.vjp]")
        g = torch.as_tensor(plan.cotangent(cot), dtype=full.dtype, device=full.device)
        try:
            (full * g).sum().backward()
        except RuntimeError as e:
            found = steps.second_backward(e)
            if found is not None:
                raise found from e
            raise
        # Every trainable parameter's gradient under our name, in the case's shape (a scalar the
        # module keeps as [1] has a gradient of [1]). A module that trains `init_L`, which
        # [grad.layout] freezes, sends that gradient too, unasked for: the reply shows it. A
        # layer built without a bias sends none for it, and the case fails on the missing output.
        grads = {names[n]: p.grad for n, p in m.named_parameters() if p.requires_grad and n in names}
        grads.update({names[n]: t.grad for n, t in computed.items() if t.requires_grad and n in names}
                     if views else {})
        # A weight kept [in, out] has the transpose of the case's gradient.
        grads.update({names[n]: grads[names[n]].T for n in getattr(names, "transposed", ())
                      if grads.get(names[n]) is not None})
        if case.encoding["threshold"] != "learnable":
            grads.pop("L_multiplier", None)
        out = {k: torch.zeros(np.shape(ours[k])) if v is None else v.reshape(np.shape(ours[k])).clone()
               for k, v in grads.items()}
        trains = False
        if not views and plan.shape[0] * plan.shape[1] <= steps.FULL_LIMIT:
            trains = self.train_mode_agrees(m, heads, case, full.detach(), g, names, out)
        if not views and self.long_unchecked and with_twin and self.dtype != "bf16":
            # Once per run (`long_length`), on the first FIRE gradient case right itself; in
            # training mode where that agreed with evaluation here.
            self.long_unchecked = False  # a mistake found fails this case alone
            self.long_unchecked = not long_length.check_torch(self, m, heads, case, names, trains)
        if with_twin:
            self.twin(case, full.detach(), plan, heads, names)
        return out

    def train_mode_agrees(self, m, heads, case, full, g, names, graded):
        """``train_mode.check_torch`` of ``m`` called as the graded call was, for the same
        cotangent ``g``, against its eval-mode bias ``full`` and gradients ``graded``; the case
        notes where it could not be compared. Returns whether they were compared and agreed
        (training mode is then deterministic, and as good as evaluation's to call)."""
        note = train_mode.check_torch(m, lambda: self.forward(m, heads, case, True, probes=False)[0],
                                      full, g, names, graded, self.dtype)
        if note is not None:
            case.note(note)
        return note is None


def frozen(m, names, case):
    """Raises on a gradient case where the module keeps ``c`` (or, where the threshold is learned,
    ``L_multiplier``), or a weight or bias of f_θ (a bias kept apart from its layer included), as
    a buffer or with ``requires_grad=False``: no gradient reaches it, so it never trains, which
    [grad.layout] says of ``init_L`` alone. Said by name, rather than as a gradient missing from
    the reply."""
    train = trainable(m)
    for theirs, ours in names.items():
        learned = ours == "c" or (ours == "L_multiplier" and case.encoding["threshold"] == "learnable")
        if learned or (is_our_name(ours) and ours not in SCALARS):
            if not train.get(theirs, False):
                how = "with requires_grad=False" if theirs in train else "as a buffer"
                raise fire_kit.Mistake(f"the module keeps `{theirs}` (the case's `{ours}`) {how}: no gradient "
                                 "reaches it, so it never trains, where [grad.layout] asks for its "
                                 "gradient; make it a trainable nn.Parameter")


def in_dtype(m, dt):
    """The torch module ``m`` in the dtype asked, bf16 included: a bf16 module computes and
    returns bfloat16, graded by the bf16 profile [num.profiles]. A module built with floating
    parameters and buffers of several dtypes (an MLP made ``.half()`` in its ``__init__``, a
    float64 table of positions) keeps them: its precision is part of what is graded, and a cast
    would grade another module."""
    kinds = {t.dtype for t in [*m.parameters(), *m.buffers()] if t.is_floating_point()}
    return m.to(dt) if len(kinds) <= 1 else m


def main(argv=None):
    a = parser(__doc__).parse_args(argv)
    mapping = parse_map(a.map)
    # Before the module is imported: a print there or in its forward would be read as a reply.
    fire_kit.reserve_stdout()
    cls = load_class(a.module)
    if is_jax_module(cls):
        from fire_conformance import jax_glue

        return jax_glue.serve(cls, a)
    arguments = from_options(a.kwargs, a.map_arg)
    arguments.check(cls)
    glue = Glue(cls, mapping, a.dtype, a.max_len, arguments, a.call, a.query_rows,
                reload=lambda: load_class(a.module))
    fire_kit.serve(glue.build, name=a.name or f"appendix-e glue: {a.module}{arguments.note(cls)}",
                   positions=calls.class_positions(cls, a.call, a.query_rows),
                   families=["fire", "edge", "fire-grad", "invalid"], dtypes=[a.dtype],
                   future_keys=a.future_keys, max_len=math.inf,  # the glue bounds its calls itself
                   long_length=False,  # made with the module in hand (`Glue.graded`)
                   state="stepped")  # the module is called across a step first (`steps`)


if __name__ == "__main__":
    main()
