"""Ready glue for a Flax/JAX FIRE shaped like the paper's Appendix E, gradients through ``jax.vjp``.

The module has Flax linen's interface: a class constructed as
``Class(num_heads=, mlp_width=, init_c=, init_L=, eps=)`` whose instances have
``init(rng, *args) -> variables`` and ``apply(variables, *args) -> bias``, the bias of the positions
``0..T-1`` as ``[H, T, T]``, ``[1, H, T, T]`` or ``[B, H, T, T]``. A ``flax.linen.Module`` is
exactly that; so is a plain-JAX class with those two methods (``examples/jax_fire.py``). A
``flax.nnx``, an Equinox and a Haiku module, which have neither, are served through a bridge
that gives them linen's interface (``nnx_bridge``, ``equinox_bridge``, ``haiku_bridge``: their
state as the variables tree, the module built with ``rngs`` or ``key``, or inside
``hk.transform``).

    fire-conformance run --impl "fire-conformance-jax path/to/flax_fire.py:FIRE"
    pytest --fire-impl path/to/flax_fire.py:FIRE        # the Appendix E glue hands JAX modules here

How it is called (``x``, ``hidden``, ``scores``, ``seq_len``, ``positions``, ``qk``) is read from
``__call__``'s parameters as in ``appendix_e``, or forced with ``--call``; an introspected
``__call__(x)`` is tried with x as ``[B, H, T, 1]``, ``[B, T, 1]`` and ``[B, H, T, T]`` in turn, as
there (B = 2 up to T = 512, 1 beyond; a ``[B, H, T, T]`` output must give both sequences the same
bias).

The parameters are found in the module's own ``params`` tree (from ``init``), layer by layer as
the torch glue loads a state dict (``jax_loading``): the leaves named ``c``, ``L_multiplier`` and,
when it is a parameter, ``init_L``; and the MLP's layers, every 2-D ``kernel`` leaf with the
``bias`` beside it, in the order their shapes compose (a ``kernel`` is ``[in, out]``, the
transpose of PyTorch's ``weight``). A module of another depth (Appendix B's two hidden layers) is
graded on the cases of its depth; a ``Dense(use_bias=False)`` layer is graded, and its mistake
named, rather than refused; a scalar kept as ``[1]`` takes the case's value; a parameter no case
value reaches is refused by name. Other layouts are mapped with ``--map OURS=PATH``, PATH
``/``-separated in the tree, e.g. ``--map mlp.0.weight=mlp/layers_0/kernel --map
L_multiplier=L_mult`` (map every layer once you map one). A mapped weight, named anything, is
read as ``[in, out]`` (``x @ w``) unless only PyTorch's ``[out, in]`` (``x @ w.T``, a port that
kept torch's layout) makes the layers compose. A scalar found by its name only outside
``params`` (an ``init_L`` constant) takes the case's value there, after the value the constructor
gave it is checked against the argument; a ``c`` or ``L_multiplier`` kept there is graded on
values and fails the gradient cases, naming its collection: no gradient reaches it. Other
variables outside ``params`` come from ``init`` with the case's constructor arguments.
A tree built with floating leaves of several dtypes (a float16 MLP) keeps them.

Options are those of ``appendix_e`` (``--dtype f32|f64``, ``--call``, ``--future-keys``,
``--max-len``, ``--kwargs``). ``--dtype f64`` turns on ``jax_enable_x64``.
"""

import contextlib
import functools
import itertools
import math
import sys

import numpy as np

from fire_conformance import command_line
from fire_conformance import calls
from fire_conformance import construction
from fire_conformance import decoding
from fire_conformance import dtypes
from fire_conformance import forward_call
from fire_conformance import fresh
from fire_conformance import kit as fire_kit
from fire_conformance import loading
from fire_conformance import long_length
from fire_conformance import logits
from fire_conformance import numpy_fire
from fire_conformance import outputs
from fire_conformance import steps
from fire_conformance import train_mode
from fire_conformance import trees
from fire_conformance.held import (
    FROM_ARGUMENT, TransformedArgument, check_arguments, check_f_theta_start, same_in_f32)
from fire_conformance.jax_calls import (
    apply, bridged, call_of, call_style, import_jax, init, linen_interface, parameter_names)
from fire_conformance.jax_loading import kept_as_built, load_jax, place, unreached


class FrozenScalar(fire_kit.Mistake, ValueError):
    """A gradient case of a module keeping ``c`` or ``L_multiplier`` outside ``params``."""


class JaxGlue:
    def __init__(self, cls, mapping, dtype, max_len, kwargs, call, query_rows="last", reload=None):
        self.jax, self.jnp = import_jax()
        # The module's file imported afresh (and bridged) where a bias may depend on earlier
        # calls (`fresh`).
        self.fresh = fresh.Fresh(reload)
        if dtype == "f64":
            self.jax.config.update("jax_enable_x64", True)
        self.cls, self.dtype, self.max_len = cls, dtype, max_len
        self.mapping = {name: tuple(path.split("/")) for name, path in mapping.items()}
        self.kwargs, self.call, self.query_rows = kwargs, call, query_rows
        # As in appendix_e.Glue: the x layout that worked where the layouts disagree (T != H).
        self.layout = None
        self.long_unchecked = True
        self.dt = {"f64": self.jnp.float64, "f32": self.jnp.float32, "bf16": self.jnp.bfloat16}[dtype]

    def layouts(self, m):
        """The call styles to try in turn: one, or for an introspected ``__call__(x)`` the x
        layouts of ``calls.X_LAYOUTS``, the one that worked before first."""
        style = self.call or call_style(m)
        if style == "positions" and self.layout == "ids":
            return ["ids"]  # read as token ids on an earlier case (``calls.reads_tokens``)
        if style == "positions":
            return sorted(calls.POSITION_LAYOUTS, key=lambda s: s != self.layout)
        if style != "x" or self.call:
            return [style]
        if calls.takes_scores(parameter_names(m)):
            return ["scores"]
        layouts = ["mask"] + calls.X_LAYOUTS if calls.takes_mask(parameter_names(m)) else calls.X_LAYOUTS
        return sorted(layouts, key=lambda s: s != self.layout)

    def args(self, plan, heads):
        """The arguments of the call ``plan`` (a ``calls.Plan``), an x of zeros in the x layouts
        (the non-zero probes of ``check_x`` and ``check_scores`` are ``evaluate``'s)."""
        jnp = self.jnp
        x = plan.x_shape(heads)
        if plan.style == "mask":
            return (jnp.ones(x, dtype=jnp.int32),)
        if x is not None:
            return (jnp.zeros(x, dtype=jnp.int32 if plan.style == "ids" else self.dt),)
        if plan.style in ("seq_len_device", "lengths_device"):
            return plan.args + (None,)
        if plan.style in ("seq_len", "lengths"):
            return plan.args
        if plan.style == "position_ids":
            return (jnp.asarray(plan.args[0])[None],)
        if plan.style == "qk_states":
            return tuple(jnp.zeros(shape, dtype=self.dt) for shape in plan.states(heads))
        return tuple(jnp.asarray(a) for a in plan.args)

    def build(self, case):
        case.check_positions()
        if case.kind not in ("bias", "vjp"):
            raise fire_kit.Skip(f"kind `{case.kind}`: the module returns the bias only")
        enc = case.encoding
        # Any depth: the module's params tree says which cases it can take (`load_jax`).
        heads, width, ours = loading.appendix_params(enc, any_depth=True)
        # At the spec's initial values the module is built on its own defaults and keeps the
        # scalars it initialises, as appendix_e.Glue.module does for a torch module
        # ([fire.defaults]): a multiplier starting at 0.5 fails those cases.
        own = construction.at_defaults(enc) and construction.construct_own(self.cls, heads, width, self.kwargs, enc)
        if own:
            case.note(construction.default_eps_note(self.cls, self.kwargs))
        m = own or construction.construct(self.cls, heads, width, enc, self.kwargs)
        styles = self.layouts(m)
        built = loading.Built(self.cls, heads, width, self.kwargs)
        errors = []
        for style in styles:
            plan = calls.plan(style, case, self.max_len, self.query_rows)
            try:
                out = self.evaluate(m, heads, case, ours, plan, built, own=bool(own), width=width)
            except calls.PositionsIgnored as e:
                names = parameter_names(m)
                if not calls.reads_tokens(names, self.call, self.layout, errors, e):
                    raise
                self.layout = "ids"
                out = self.evaluate(m, heads, case, ours, calls.plan("ids", case, self.max_len),
                                    built, own=bool(own), width=width)
                case.note(calls.token_note(names[0]))
                return out
            except (outputs.NotABias, loading.ParamsMismatch, fire_kit.Mistake):
                raise
            except (*forward_call.LAYOUT_ERRORS, AttributeError) as e:
                if style in calls.LENGTH_STYLES and not self.call:
                    raise calls.as_lengths_failed(style, parameter_names(m), e) from e
                beyond = calls.past_context(style, case, self.max_len, e)
                if beyond is not None:
                    raise beyond from e
                if isinstance(e, AttributeError) or len(styles) == 1:
                    raise
                if style == self.layout:
                    raise outputs.remembered_layout_failed(style, e, case.length)
                errors.append((style, e))
                continue
            if style == "ids" and self.layout == "ids":
                case.note(calls.token_note(parameter_names(m)[0]))
            elif case.length != heads:
                self.layout = style
            return out
        raise outputs.every_layout_failed(errors)

    def evaluate(self, m, heads, case, ours, plan, built, own=False, width=None):
        """The case's output from ``m`` called as ``plan`` says (``built``: how ``m`` was built,
        with ``heads`` and ``width``; ``own``: on its own defaults, whose initial scalars it
        keeps)."""
        jax, jnp = self.jax, self.jnp
        args = self.args(plan, heads)
        variables = dict(init(m, jax.random.PRNGKey(0), *args))
        flat = trees.flatten(variables.get("params", {}))
        others = {(coll,) + path: leaf for coll, tree in variables.items() if coll != "params"
                  for path, leaf in trees.flatten(dict(tree)).items()}
        elsewhere = [p for p, leaf in others.items() if np.size(leaf) <= 1]
        loaded, outside, in_out, unset = load_jax(flat, ours, self.mapping, built, elsewhere,
                                                  not getattr(self.cls, "sorts_params", False))
        self.kwargs.check_reached(self.cls, list(loaded.values()) + list(outside.values()), case.encoding)
        case.note(loading.reading({**loaded, **outside}, ours, "/".join, in_out))
        self.check_held(case, heads, width, args, flat, others, loaded, outside, ours, own)
        if case.kind == "vjp":
            frozen = [(name, path) for path, name in outside.items() if name == "c" or (
                name == "L_multiplier" and case.encoding["threshold"] == "learnable")]
            if frozen:
                name, path = frozen[0]
                kept = f"`{name}`" if path[-1] == name else f"`{'/'.join(path[1:])}` (the case's `{name}`)"
                raise FrozenScalar(
                    f"the module keeps {kept} in the `{path[0]}` collection, outside `params`: no "
                    f"gradient reaches it, so it never trains, where [grad.layout] asks for its "
                    f"gradient ({'the threshold L = |m·L_init| is fixed' if name == 'L_multiplier' else 'ψ is fixed'}); "
                    + getattr(self.cls, "trains_as", "declare it with self.param"))
        for path, name in outside.items():
            if own and not same_in_f32(others[path], ours[name]):
                continue  # the module's own initial value, kept as in `params` below
            dt = getattr(others[path], "dtype", self.dt)
            others[path] = jnp.asarray(place(ours[name], others[path], path), dtype=dt)
        for coll in {p[0] for p in outside}:
            variables[coll] = trees.unflatten({p[1:]: v for p, v in others.items() if p[0] == coll})
        # A tree whose floating leaves are of several dtypes as built (a float16 MLP) keeps
        # them: its precision is part of what is graded (``appendix_e.in_dtype``).
        kinds = {np.dtype(leaf.dtype) for leaf in flat.values() if jnp.issubdtype(leaf.dtype, jnp.floating)}
        if own:
            check_f_theta_start({name: flat[path] for path, name in loaded.items()})
        for path, name in loaded.items():
            dt = self.dt if len(kinds) <= 1 else flat[path].dtype
            if own and name in construction.SCALARS and not same_in_f32(flat[path], ours[name]):
                # The module's own initial value, kept (one equal to the case's in float32 takes
                # the case's exact value).
                flat[path] = jnp.asarray(flat[path], dtype=dt)
                continue
            flat[path] = jnp.asarray(place(ours[name], flat[path], path, path in in_out), dtype=dt)
        params = trees.unflatten(flat)
        rows, cols = plan.shape
        if unset:
            if not self.constants(m, variables, flat, unset, args, heads, plan):
                raise unreached(unset, ours)
            case.note(kept_as_built(unset))

        def bias(p, check=True, given=args):
            out = apply(m, {**variables, "params": p}, *given)
            return outputs.squeeze(out, heads, rows, cols, batch=plan.batch, check=check)

        small = width is not None and case.encoding.get("type") == "fire" and rows * cols <= steps.FULL_LIMIT
        # A module built on its own defaults has no twin (one built with another init_c would
        # not be on them), but takes the step all the same.
        twinned = small and not own
        # What training does before the graded call (`steps.jax_step`); the twin, built anew,
        # then shows what the module kept from it.
        first = steps.jax_step(lambda p: bias(p, check=False), params, jax) if small else None
        stepped = first is not None
        if case.kind == "bias":
            full = bias(params)
        else:
            # Called on concrete values first: the batch entries are compared there (under
            # jax.vjp they are tracers), and a NumPy bias is seen before tracing fails on it.
            direct = bias(params)
            if isinstance(direct, np.ndarray):
                raise fire_kit.Mistake(outputs.numpy_output("jax.vjp"))
            cot = case.inputs["cotangent"].array()
            want = (heads, len(case.queries), len(case.keys))
            if cot.shape != want:
                raise ValueError(f"the cotangent has shape {list(cot.shape)}, the bias {list(want)}")
            full, pullback = jax.vjp(lambda p: bias(p, check=False), params)
        as_numpy = lambda a: np.asarray(jnp.asarray(a, dtype=jnp.float32 if self.dtype != "f64"  # noqa: E731
                                                    else jnp.float64), dtype=np.float64)
        if stepped:
            steps.check_jax_kept(np.array(full if case.kind == "bias" else direct), first)
        if rows * cols <= steps.FULL_LIMIT:
            # The same concrete call again, before any probe (which would blame x for it): a
            # module that changes from call to call (state it updates and reads back) shows.
            steps.check_repeated(plan.pick(as_numpy(full if case.kind == "bias" else direct)),
                                 plan.pick(as_numpy(bias(params, check=False))), self.dtype)
        if case.kind == "vjp" and small:
            # The same values called directly and under jax.vjp (an NNX module merged anew from
            # the one built, as nnx.grad does): before any probe, which would blame x for it.
            steps.check_traced(plan.pick(as_numpy(direct)), plan.pick(as_numpy(full)), case, self.dtype)
        rows_n, cols_n = plan.shape
        if plan.style in calls.DECODING_STYLES and self.query_rows == "last" and rows_n < cols_n:
            whole = (args[1], args[1]) if plan.style == "qk_states" else (cols_n, cols_n) + args[2:]
            square = apply(m, {**variables, "params": params}, *whole)
            decoding.check_last_rows(np.asarray(full, dtype=np.float64),
                                  np.asarray(outputs.squeeze(square, heads, cols_n, cols_n, batch=plan.batch),
                                             dtype=np.float64),
                                  self.dtype, plan.style)
        if small:
            self.past_agrees(m, variables, params, args, plan, heads, as_numpy(full))
        always = calls.may_read_tokens(parameter_names(m), self.call, plan.style)
        counting = calls.counted(plan.args[0], always) if plan.style in calls.POSITION_LAYOUTS else None
        if counting is not None:
            given = jnp.asarray(counting) if plan.style == "positions" else jnp.asarray(counting)[None]
            try:
                again = as_numpy(outputs.squeeze(apply(m, {**variables, "params": params}, given),
                                                    heads, rows, cols))
            except Exception:  # a probe past the module's own bounds tells nothing
                again = None
            if again is not None:
                calls.check_positions_used(as_numpy(full), again, list(plan.args[0]), counting)
        if plan.style in calls.VALUE_FREE:
            x_dt = jnp.int32 if plan.style == "ids" else self.dt
            probe = calls.probe_for(plan.style, args[0].shape)
            probed = apply(m, {**variables, "params": params}, jnp.asarray(probe, dtype=x_dt))
            calls.check_x(as_numpy(full), as_numpy(outputs.squeeze(probed, heads, rows, cols, batch=plan.batch)),
                          probe, self.dtype)
            if plan.batch > 1:
                varied = calls.probe_for(plan.style, args[0].shape, varied=True)
                probed = apply(m, {**variables, "params": params}, jnp.asarray(varied, dtype=x_dt))
                if hasattr(probed, "shape"):
                    calls.check_x_varied(as_numpy(full), as_numpy(probed), varied, heads, self.dtype)
        if plan.style == "qk_states":
            q, k = logits.states_probe(*plan.states(heads))
            probed = apply(m, {**variables, "params": params}, jnp.asarray(q, dtype=self.dt),
                             jnp.asarray(k, dtype=self.dt))
            logits.check_states(as_numpy(full), as_numpy(probed), q, k, self.dtype)
        if plan.style in calls.SCORES_STYLES:
            scores = jnp.asarray(logits.scores_probe(args[0].shape), dtype=self.dt)
            probed = apply(m, {**variables, "params": params}, scores)
            named = plan.style == "scores" and calls.takes_scores(parameter_names(m))
            logits.check_scores(full, probed, scores, self.dtype, named, to_numpy=as_numpy)
        kept = {p: others[p] for p in outside}
        if twinned:
            self.twin(case, heads, width, params, kept, unset, args, plan, as_numpy(full), stepped)
            if "init_L" not in loaded.values() and "init_L" not in outside.values():
                self.keeps_own_threshold(case, heads, width, params, kept, unset, args, plan,
                                         as_numpy(full))
        elif small:
            # On its own defaults: no twin, but the file imported afresh, built the same way.
            c = float(case.encoding["c"])
            self.fresh.check(case, plan.pick(as_numpy(full)), lambda cls: plan.pick(self.anew(
                cls, case, heads, width, c, params, kept, unset, args, plan, own=True)), self.dtype)
        if full.dtype != self.dt and not dtypes.wider_than_bf16(self.dtype, full.dtype):
            raise fire_kit.UnsupportedDtype(f"the module returns {full.dtype} but --dtype {self.dtype} "
                                            f"was given; {dtypes.rerun_advice(full.dtype)}")
        if case.kind == "bias":
            return plan.pick(np.asarray(full, dtype=np.float64))
        (grads,) = pullback(jnp.asarray(plan.cotangent(cot), dtype=full.dtype))
        # Every parameter's gradient under our name, in the case's shape. A module that trains
        # `init_L` (a leaf of `params`), which [grad.layout] freezes, sends that gradient too,
        # unasked for: the reply shows it. A layer without a bias sends none for it, and the
        # case fails on the missing output.
        gflat = trees.flatten(grads)
        training = None
        if small:
            note, training = self.train_mode_agrees(m, variables, params, args, plan, heads, full, gflat,
                                                    jnp.asarray(plan.cotangent(cot), dtype=full.dtype),
                                                    loaded)
            if note is not None:
                case.note(note)
        if small and self.long_unchecked and self.dtype != "bf16":
            # Once per run (`long_length`), on the first FIRE gradient case right itself; in
            # training mode where that agreed with evaluation here.
            self.long_unchecked = False  # a mistake found fails this case alone
            self.long_unchecked = not long_length.check_jax(self, m, variables, params, plan, heads,
                                                               case, loaded, in_out, jax, training)
        out = {}
        for path, name in loaded.items():
            g_leaf = np.asarray(gflat[path], dtype=np.float64)
            if path in in_out:
                g_leaf = g_leaf.T
            out[name] = g_leaf.reshape(np.shape(ours[name]))
        if case.encoding["threshold"] != "learnable":
            out.pop("L_multiplier", None)
        return out

    def past_agrees(self, m, variables, params, args, plan, heads, full):
        """``decoding.check_past`` where ``m``'s call takes the cache's length
        (``decoding.past_name``): called on the last half of the square ``full`` ([H, T, T], its
        own bias) with the first half cached, and on its last token with the rest cached
        (``decoding.cached_lengths``), it must return the square's last rows."""
        past = decoding.past_name(m, call_of(m))
        rows, cols = plan.shape
        if past is None or plan.style not in decoding.PAST_LAYOUTS or rows != cols or rows < 2:
            return
        jnp = self.jnp
        for before in decoding.cached_lengths(rows):
            shape = decoding.with_length(args[0].shape, plan.style, rows - before)
            given = jnp.ones(shape, dtype=jnp.int32) if plan.style == "mask" else \
                jnp.zeros(shape, dtype=jnp.int32 if plan.style == "ids" else self.dt)
            raw = apply(m, {**variables, "params": params}, given, **{past: before})
            try:
                decoded = np.asarray(outputs.squeeze(raw, heads, rows - before, cols, batch=plan.batch),
                                     dtype=np.float64)
            except Exception:  # its shape is not a bias of the new rows over every key
                decoded = None
            decoding.check_past(decoded, full, before, past, self.dtype,
                                list(getattr(raw, "shape", [])) or None)

    def training_call(self, m, variables):
        """``m``'s call with its training flag (``train_mode.jax_flag``: ``deterministic=False``,
        ``train=True``), where its call takes one: ``(call, how, linen)``, ``call(p, args,
        fixed=False)`` its raw output for the parameters ``p``; else ``(None, None, False)``. A
        Flax linen module is given a key per call for each rng stream it asks for (``dropout``,
        and any other its ``make_rng`` names): keys of its own per call, as training's steps
        have (the same ones each call where ``fixed``), and linen's ``nn.Dropout`` layers off
        (``train_mode.linen_dropouts_off``): randomness of the module's own shows as a bias
        that changes from call to call (``train_mode.check_jax``)."""
        flag = getattr(m, "training_flag", None) or train_mode.jax_flag(call_of(m))
        if flag is None:
            return None, None, False
        name, value = flag
        linen = any(k.__module__.startswith("flax.linen") for k in type(m).__mro__)
        # A flag its field gives (`--kwargs '{"deterministic": true}'`) is changed there.
        target, given = (m.clone(**{name: value}), {}) if linen and train_mode.field_gives(m, name) \
            else (m, {name: value})
        keys = itertools.count(1)
        # The rng streams training gives a linen module: dropout's, and those it asked for.
        streams = ["dropout"]

        def call(p, args, fixed=False):
            while True:
                seeds = itertools.count(calls.SEED) if fixed else keys
                rngs = {"rngs": {s: self.jax.random.PRNGKey(next(seeds)) for s in streams}} if linen else {}
                try:
                    with train_mode.linen_dropouts_off() if linen else contextlib.nullcontext():
                        return apply(target, {**variables, "params": p}, *args, **given, **rngs)
                except Exception as e:
                    stream = train_mode.missing_stream(e)
                    if not linen or stream is None or stream in streams or len(streams) > 8:
                        raise
                    streams.append(stream)

        return call, getattr(m, "training_how", None) or f"`{name}={value}`", linen

    def train_mode_agrees(self, m, variables, params, args, plan, heads, full, grads, cot, loaded):
        """``train_mode.check_jax``: ``m`` called in training mode (``training_call``), where its
        call takes a flag, against the graded call's bias ``full`` and gradients ``grads`` for
        the same cotangent ``cot``. Returns ``(note, training)``: the case's note where it could
        not be compared (else None), and, where it was compared and agreed, ``(call, how)`` for
        the long-length check to call it so (else None)."""
        call, how, linen = self.training_call(m, variables)
        if call is None:
            return None, None
        rows, cols = plan.shape

        def trained(p, fixed=False):
            return outputs.squeeze(call(p, args, fixed), heads, rows, cols, batch=plan.batch, check=False)

        # A linen module's keys can be fixed: its training call is then a function again.
        fixed = functools.partial(trained, fixed=True) if linen else None
        note = train_mode.check_jax(trained, params, full, grads, cot, loaded, self.dtype, self.jax,
                                    how, fixed)
        return note, (None if note is not None else (call, how))

    def check_held(self, case, heads, width, args, flat, others, loaded, outside, ours, own):
        """Checks the c and L_init the module holds as built, wherever it keeps them
        (``check_arguments``, [fire.params]): built from the case's, it must hold
        them (an argument ignored fails, a transform of it is refused); built on its own defaults
        and holding others than the spec's, it is built again from the case's values to tell a
        default of its own (graded as such) from a transform (``log c`` held as ``c``), which no
        case value can be loaded into."""
        jax = self.jax
        held = {name: flat[path] for path, name in loaded.items() if path in flat}
        held.update({name: others[path] for path, name in outside.items()})
        where = {name: ("params",) + path for path, name in loaded.items() if path in flat}
        where.update({name: path for path, name in outside.items()})

        def holds(enc):
            again = construction.construct(self.cls, heads, width, enc, self.kwargs)
            return dict(init(again, jax.random.PRNGKey(0), *args))

        def rebuild(name, arg, value):
            # The module built again with another value of the argument: what it then holds.
            key = {"init_c": "c", "init_L": "l_init"}[arg]
            return trees.lookup(holds({**case.encoding, key: value}), where[name])

        if not own:
            check_arguments(held, case, self.dtype, rebuild, self.kwargs.untaken(self.cls),
                                         lambda arg: self.kwargs.given_as(self.cls, arg))
            return
        if all(same_in_f32(v, ours[name]) for name, v in held.items()
               if name in FROM_ARGUMENT):
            return
        try:
            given = holds(case.encoding)
            check_arguments({name: trees.lookup(given, where[name]) for name in held},
                                         case, self.dtype, rebuild, self.kwargs.untaken(self.cls),
                                         lambda arg: self.kwargs.given_as(self.cls, arg))
        except TransformedArgument:
            raise
        except Exception:
            pass  # a default of its own, graded as such

    def constants(self, m, variables, flat, unset, args, heads, plan):
        """Whether the module's bias has no gradient in its parameters ``unset``, which take none
        of the case's values: arrays it reads through ``jax.lax.stop_gradient`` (a table of
        positions, an ε kept as an array in Equinox, which trains every floating array), kept as
        built and never trained, rather than parameters beside FIRE's. Tried at the case's
        values with a fixed random cotangent; a module the gradient cannot pass says no. A call
        that fails outright raises, as the graded call would: ``build`` tries the next layout
        of x (a module reading one sequence ``[T, D]`` fails on a batch)."""
        jax, jnp = self.jax, self.jnp
        rows, cols = plan.shape
        cot = jnp.asarray(np.random.default_rng(0).standard_normal((heads, rows, cols)), dtype=self.dt)

        def weighted(part):
            p = trees.unflatten({**flat, **part})
            out = outputs.squeeze(apply(m, {**variables, "params": p}, *args), heads, rows, cols,
                                  batch=plan.batch, check=False)
            return jnp.sum(jnp.asarray(out, dtype=self.dt) * cot)

        weighted({p: flat[p] for p in unset})
        try:
            grads = jax.grad(weighted)({p: flat[p] for p in unset})
        except Exception:
            return False
        return all(not bool(jnp.any(g != 0)) for g in grads.values())

    def twin(self, case, heads, width, params, kept, unset, args, plan, full, stepped):
        """Raises where the module built anew with another ``init_c``, given the same ``params``
        (but its own values of the constants among them, ``unset``) and the scalars the glue
        loaded outside them (``kept``: ``{(collection,) + path: value}``) and its own values of
        everything else, returns another bias than ``full`` (``steps.twin_mistake``): a bias
        that follows the constructor's ``init_c`` (a ψ table computed in ``setup``, or in an NNX
        ``__init__`` and held as an attribute) rather than
        the ``c`` in ``params``; with ``stepped`` (the graded module took ``steps.jax_step``),
        one kept from the step's call. A twin that cannot be built or applied tells nothing.
        Then the module built so from its file imported afresh, with the case's ``init_c``
        (``fresh``): what the program keeps outside the module, which the twin shares."""
        c = float(case.encoding["c"])
        other = c * 1.5 if c != 0 else 0.25

        def anew(cls, init_c):
            return plan.pick(self.anew(cls, case, heads, width, init_c, params, kept, unset, args, plan))

        try:
            twin = anew(self.cls, other)
        except Exception:
            return
        got = plan.pick(full)
        if steps.twin_differs(got, twin, self.dtype):
            reference = numpy_fire.reference(case)
            if reference is not None:
                raise steps.twin_mistake(got, twin, reference, case.queries, case.keys, other,
                                         stepped=steps.JAX_STEP if stepped else None)
        self.fresh.check(case, got, lambda cls: anew(cls, c), self.dtype)

    def keeps_own_threshold(self, case, heads, width, params, kept, unset, args, plan, full):
        """Raises ``IgnoredArgument`` where the constructor takes ``init_L``, nothing the glue
        loads holds it, and the module built with an ``init_L`` that moves the threshold
        L = |m·L_init| past every position, applied to the same values, returns the case's bias
        ``full`` unchanged: its threshold is its own, whatever it is given [fire.params]
        (``appendix_e.Glue.keeps_own_threshold``). One that cannot be built tells nothing."""
        def built_with(l_init):
            try:
                return plan.pick(self.anew(self.cls, case, heads, width, float(case.encoding["c"]), params,
                                           kept, unset, args, plan, l_init=l_init))
            except Exception:
                return None

        steps.check_own_threshold(case, plan.pick(full), built_with, self.dtype,
                                  self.kwargs.untaken(self.cls), self.kwargs.given_as(self.cls, "init_L"))

    def anew(self, cls, case, heads, width, init_c, params, kept, unset, args, plan, own=False,
             l_init=None):
        """The bias (``[H, R, C]`` float64) of a module of ``cls`` built anew with ``init_c``
        (and ``l_init`` where given; ``own``: on its own defaults, as the graded module was,
        ``build``) and applied to the case's ``params`` and the scalars ``kept`` outside them,
        its own values of the constants ``unset`` and of everything else (``twin``)."""
        jax, jnp = self.jax, self.jnp
        rows, cols = plan.shape
        enc = {**case.encoding, "c": init_c}
        if l_init is not None:
            enc["l_init"] = l_init
        m = own and construction.construct_own(cls, heads, width, self.kwargs, case.encoding)
        m = m or construction.construct(cls, heads, width, enc, self.kwargs)
        variables = {coll: trees.flatten(dict(tree)) for coll, tree in dict(init(m, jax.random.PRNGKey(0), *args)).items()}
        for path, value in kept.items():
            variables[path[0]][path[1:]] = value
        # Its own constants (``constants``: a table made from init_c and read through
        # stop_gradient shows), the case's values in everything else.
        given = trees.flatten(params)
        given.update({p: variables["params"][p] for p in unset if p in variables.get("params", {})})
        variables = {coll: trees.unflatten(flat) for coll, flat in variables.items()}
        out = outputs.squeeze(apply(m, {**variables, "params": trees.unflatten(given)}, *args),
                              heads, rows, cols, batch=plan.batch)
        return np.asarray(jnp.asarray(out, dtype=jnp.float64 if self.dtype == "f64"
                                      else jnp.float32), dtype=np.float64)


def serve(cls, a):
    """Serves ``cls`` with the options ``a`` parsed by ``command_line.parser``; a ``flax.nnx``,
    Equinox or Haiku module through linen's interface (``nnx_bridge``, ``equinox_bridge``,
    ``haiku_bridge``)."""
    positions = calls.class_positions(cls, a.call, a.query_rows)
    cls = bridged(cls)
    linen_interface(cls)
    mapping = command_line.parse_map(a.map)
    arguments = construction.from_options(a.kwargs, a.map_arg)
    arguments.check(cls)
    glue = JaxGlue(cls, mapping, a.dtype, a.max_len, arguments, a.call,
                   a.query_rows, reload=lambda: bridged(command_line.load_class(a.module)))
    fire_kit.serve(glue.build, name=a.name or f"jax glue: {a.module}{arguments.note(cls)}",
                   positions=positions,
                   families=["fire", "edge", "fire-grad", "invalid"], dtypes=[a.dtype],
                   future_keys=a.future_keys, max_len=math.inf,  # the glue bounds its calls itself
                   long_length=False,  # made with the module in hand (`evaluate`)
                   state="stepped")  # the module is called across a step first (`steps`)


def main(argv=None):
    a = command_line.parser(__doc__).parse_args(argv)
    command_line.parse_map(a.map)
    import_jax()
    # Before the module is imported: a print there or in its __call__ would be read as a reply.
    fire_kit.reserve_stdout()
    return serve(command_line.load_class(a.module), a)


if __name__ == "__main__":
    sys.exit(main())
