"""The pytest plugin: every golden-vector case one pytest item, graded by the harness.

From the command line (no test file needed):

    pytest --fire-impl path/to/model.py:FIRE          # a module shaped like Appendix E (torch, NumPy, Flax/JAX)
    pytest --fire-glue my_glue.py                     # a file defining build(case)
    pytest --fire-cmd "./my_fire_server"              # any program speaking spec/protocol.md

or from a test file, paths relative to it:

    from fire_conformance.pytest_plugin import fire_cases
    test_my_fire = fire_cases(impl="../my_fire.py:MyFire", dtype="f32")

Each case is an item named by its case id (``fire/depth/depth-2``), marked with its family
(``fire``, ``fire_grad``, ``edge``, ``invalid``, ... ``-`` read as ``_``) and ``fire_conformance``,
so ``-k depth``, ``-m "fire and not edge"`` and ``--junitxml`` work as usual. A failing item
shows the harness's own report of that case — the worst element, how many differ, the
diagnosis — and the run-level diagnosis; skips carry the harness's reason; cases listed in
``--fire-xfails FILE`` are expected failures (and fail when they pass).

The plugin is a thin layer over the harness: it asks the binary for the case list
(``fire-conformance list --json``), runs the harness once per suite over the selected items
(``fire-conformance run --json``) when the first of them runs, and maps each case's status to
its item. It grades nothing itself.
"""

import json
import os
import shlex
import subprocess
import sys

import pytest

from fire_conformance import BinaryNotFound, binary

FAIL_ON = ("both", "values", "validation")


def pytest_addoption(parser):
    g = parser.getgroup("fire-conformance", "FIRE conformance (every golden-vector case one item)")
    g.addoption("--fire-impl", metavar="FILE.py:CLASS",
                help="check a FIRE module shaped like the paper's Appendix E (torch, NumPy or Flax/JAX)")
    g.addoption("--fire-glue", metavar="FILE.py", help="check the FIRE behind a file defining build(case)")
    g.addoption("--fire-cmd", metavar="CMD", help="check a program speaking the protocol (spec/protocol.md)")
    g.addoption("--fire-dtype", metavar="DTYPE",
                help="the dtype to run in: f32 (default for --fire-impl), f64 or bf16")
    g.addoption("--fire-map", action="append", default=[], metavar="OURS=THEIRS",
                help="rename a parameter for --fire-impl (repeatable), e.g. L_multiplier=L_mult")
    g.addoption("--fire-map-arg", action="append", default=[], metavar="OURS=YOURS",
                help="the constructor's name for one of Appendix E's arguments for --fire-impl (repeatable), e.g. num_heads=n_heads")
    g.addoption("--fire-kwargs", metavar="JSON", help="other constructor arguments for --fire-impl, a JSON object")
    g.addoption("--fire-call", metavar="STYLE", help="how --fire-impl calls forward: x, hidden, scores, seq_len, positions, qk, ...")
    g.addoption("--fire-query-rows", choices=["last", "first"],
                help="which rows --fire-impl's forward(query_length, key_length) returns for fewer queries than keys: last (default, a decoding step) or first (T5's compute_bias)")
    g.addoption("--fire-future-keys", metavar="CONVENTION",
                help="what --fire-impl gives keys after the query: mirrored (default), zero, masked (-inf or any value <= -1e3), negated (unchecked there)")
    g.addoption("--fire-xfails", metavar="FILE", help="case-id globs expected to fail, one per line")
    g.addoption("--fire-fail-on", choices=FAIL_ON,
                help="which verdicts become items: values, validation or both (default)")
    g.addoption("--fire-vectors", metavar="DIR", help="a suite folder instead of the embedded suite")
    g.addoption("--fire-timeout", metavar="SECONDS", help="seconds allowed per case (harness default 30; a process's first case has the 120 s start-up allowance)")
    g.addoption("--fire-binary", metavar="PATH", help="the fire-conformance binary (default: the installed one)")


def pytest_configure(config):
    config.addinivalue_line("markers", "fire_conformance: a golden-vector case of fire-conformance")


def fire_cases(impl=None, glue=None, cmd=None, dtype=None, map=None, call=None, future_keys=None,
               xfails=None, fail_on=None, vectors=None, run=(), skip=(), timeout=None, query_rows=None,
               map_arg=None, kwargs=None):
    """A test-module attribute that pytest expands into one item per golden-vector case.

    Exactly one of ``impl`` (``"path/to/model.py:Class"``, Appendix E's shape), ``glue`` (a file
    defining ``build(case)``) or ``cmd`` (a protocol command line). File paths are relative to the
    test file. ``map`` is ``{ours: theirs}`` for parameters, ``map_arg`` the same for the
    constructor's arguments (``{"num_heads": "n_heads"}``) and ``kwargs`` its other arguments;
    ``run`` and ``skip`` are case-id globs; ``xfails`` a file of case-id globs; ``fail_on``
    limits the items to the ``values`` or ``validation`` cases. ``fail_on`` and ``timeout`` left
    unset take pytest's ``--fire-fail-on`` and ``--fire-timeout`` where given (how strict a run
    is and how long a case may take are the run's to choose), else ``both`` and the harness's
    default.
    """
    return FireCases(dict(impl=impl, glue=glue, cmd=cmd, dtype=dtype, map=dict(map or {}),
                          map_arg=dict(map_arg or {}), kwargs=kwargs, call=call,
                          future_keys=future_keys, xfails=xfails, fail_on=fail_on, vectors=vectors,
                          run=list(run), skip=list(skip), timeout=timeout, query_rows=query_rows))


class FireCases:
    """What ``fire_cases`` returns; collected by ``pytest_pycollect_makeitem``."""

    __test__ = False

    def __init__(self, settings):
        self.settings = settings


def _cli_settings(config):
    o = config.getoption
    for option in ("fire_map", "fire_map_arg"):
        bad = [kv for kv in o(option) if "=" not in kv]
        if bad:
            raise pytest.UsageError(f"fire-conformance: --{option.replace('_', '-')} takes OURS=THEIRS, got {bad}")
    kwargs = o("fire_kwargs")
    if kwargs is not None:
        try:
            kwargs = json.loads(kwargs)
        except json.JSONDecodeError as e:
            raise pytest.UsageError(f"fire-conformance: --fire-kwargs is not JSON ({e})")
    return dict(impl=o("fire_impl"), glue=o("fire_glue"), cmd=o("fire_cmd"), dtype=o("fire_dtype"),
                map=dict(kv.split("=", 1) for kv in o("fire_map")),
                map_arg=dict(kv.split("=", 1) for kv in o("fire_map_arg")), kwargs=kwargs,
                call=o("fire_call"),
                future_keys=o("fire_future_keys"), xfails=o("fire_xfails"),
                fail_on=o("fire_fail_on") or "both", vectors=o("fire_vectors"), run=[], skip=[],
                timeout=o("fire_timeout"), query_rows=o("fire_query_rows"))


def _resolve(path, base):
    return path if path is None or os.path.isabs(path) else os.path.normpath(os.path.join(base, path))


def implementation_command(s, base):
    """The ``--impl`` command line for settings ``s``, file paths resolved against ``base``;
    ``pytest.UsageError`` naming what is wrong (a missing file, a spec without ``:Class``)."""
    given = [k for k in ("impl", "glue", "cmd") if s.get(k)]
    if len(given) != 1:
        raise pytest.UsageError("fire-conformance: give exactly one of --fire-impl FILE.py:CLASS, "
                                f"--fire-glue FILE.py or --fire-cmd CMD (got {given or 'none'})")
    py = [sys.executable, "-m"]
    if s.get("cmd"):
        return s["cmd"]
    if s.get("glue"):
        path = _resolve(s["glue"], base)
        if not os.path.isfile(path):
            raise pytest.UsageError(f"fire-conformance: glue file not found: {path}")
        return shlex.join(py + ["fire_conformance.glue", path])
    spec = s["impl"]
    file, _, cls = spec.rpartition(":")
    if not file or not cls or not cls.isidentifier():
        raise pytest.UsageError(f"fire-conformance: --fire-impl takes path/to/file.py:ClassName, got {spec!r}")
    path = _resolve(file, base)
    if not os.path.isfile(path):
        raise pytest.UsageError(f"fire-conformance: module file not found: {path}")
    args = py + ["fire_conformance.appendix_e", f"{path}:{cls}", "--dtype", s.get("dtype") or "f32"]
    for ours, theirs in (s.get("map") or {}).items():
        args += ["--map", f"{ours}={theirs}"]
    for ours, theirs in (s.get("map_arg") or {}).items():
        args += ["--map-arg", f"{ours}={theirs}"]
    if s.get("kwargs") is not None:
        if not isinstance(s["kwargs"], dict):
            raise pytest.UsageError(f"fire-conformance: kwargs must be an object of constructor arguments, got {s['kwargs']!r}")
        args += ["--kwargs", json.dumps(s["kwargs"])]
    if s.get("call"):
        args += ["--call", s["call"]]
    if s.get("future_keys"):
        args += ["--future-keys", s["future_keys"]]
    if s.get("query_rows"):
        args += ["--query-rows", s["query_rows"]]
    return shlex.join(args)


def _glob_escape(case_id):
    return "".join(f"[{c}]" if c in "*?[]{}" else c for c in case_id)


class FireSuite(pytest.Collector):
    """One implementation against the suite: its items are the cases."""

    def setup_settings(self, settings, base):
        # What the test file leaves unset of the run's own knobs, the command line sets.
        settings = dict(settings)
        for key, option in (("fail_on", "fire_fail_on"), ("timeout", "fire_timeout")):
            if settings.get(key) is None:
                settings[key] = self.config.getoption(option)
        self.settings = settings
        self.base = base
        self.command = implementation_command(settings, base)
        if (settings.get("fail_on") or "both") not in FAIL_ON:
            raise pytest.UsageError(f"fire-conformance: fail_on must be one of {FAIL_ON}")
        self.results = None
        return self

    def _binary(self):
        given = self.config.getoption("fire_binary")
        if given:
            return given
        try:
            return binary()
        except BinaryNotFound as e:
            raise pytest.UsageError(str(e))

    def _suite_args(self):
        args = []
        if self.settings.get("vectors"):
            args += ["--vectors", _resolve(self.settings["vectors"], self.base)]
        for g in self.settings.get("run") or []:
            args += ["--run", g]
        for g in self.settings.get("skip") or []:
            args += ["--skip", g]
        return args

    def collect(self):
        exe = self._binary()
        p = subprocess.run([exe, "list", "--json"] + self._suite_args(), capture_output=True, text=True)
        if p.returncode != 0:
            raise pytest.UsageError(f"fire-conformance list failed (exit {p.returncode}): {p.stderr.strip()}")
        listing = json.loads(p.stdout)
        self.suite = listing["suite"]
        fail_on = self.settings.get("fail_on") or "both"
        self.case_ids = []
        registered = set()
        for case in listing["cases"]:
            if fail_on != "both" and case["question"] != fail_on:
                continue
            family = case["family"].replace("-", "_")
            if family not in registered:
                registered.add(family)
                self.config.addinivalue_line(
                    "markers", f"{family}: fire-conformance cases of the `{case['family']}` family")
            self.case_ids.append(case["id"])
            item = FireCase.from_parent(self, name=case["id"])
            item.case = case
            item.add_marker("fire_conformance")
            item.add_marker(family)
            yield item

    def run_harness(self):
        """Runs the harness once over this suite's selected items; caches the JSON report."""
        if self.results is not None:
            return self.results
        selected = [it.name for it in self.session.items if isinstance(it, FireCase) and it.parent is self]
        args = [self._binary(), "run", "--json", "--impl", self.command] + self._suite_args()
        if selected != self.case_ids:
            for case_id in selected:
                args += ["--run", _glob_escape(case_id)]
        s = self.settings
        if s.get("dtype"):
            args += ["--dtype", s["dtype"]]
        if s.get("xfails"):
            args += ["--xfails", _resolve(s["xfails"], self.base)]
        if s.get("timeout"):
            args += ["--timeout", str(s["timeout"])]
        # The verdicts that count, as the items were selected: under the default `both` a run of
        # the value items alone would have "nothing graded" for validation.
        args += ["--fail-on", s.get("fail_on") or "both"]
        # The glue runs in a fresh interpreter: it imports this very package.
        env = dict(os.environ)
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in [env.get("PYTHONPATH")] if p])
        p = subprocess.run(args, capture_output=True, text=True, env=env,
                           cwd=str(self.config.invocation_params.dir))
        try:
            report = json.loads(p.stdout)
        except ValueError:
            report = None
        self.results = {"report": report, "exit": p.returncode, "stderr": p.stderr.strip(),
                        "command": shlex.join(args)}
        if report is not None:
            self.results["cases"] = {c["id"]: c for c in report["cases"]}
            self.config.stash.setdefault(_REPORTS, []).append((self.nodeid, report))
        return self.results


class FireFailure(Exception):
    """A case the harness failed; the message is its report."""


class FireCase(pytest.Item):
    """One golden-vector case."""

    def runtest(self):
        r = self.parent.run_harness()
        if r["report"] is None:
            raise FireFailure(f"the harness did not run (exit {r['exit']}):\n{r['stderr']}\n"
                              f"command: {r['command']}")
        case = r["cases"].get(self.name)
        if case is None:
            raise FireFailure(f"the harness's report has no case {self.name} (exit {r['exit']}):\n{r['stderr']}")
        status = case["status"]
        text = case.get("report") or "\n".join([self.name] + case.get("details", []))
        if status == "passed":
            return
        if status in ("skipped", "inconclusive"):
            pytest.skip(" ".join(case.get("details") or [status]))
        if status == "xfailed":
            pytest.xfail(text.strip())
        report = r["report"]
        if "run_lines" in report:
            # The run-level lines exactly as the harness's text report has them.
            raise FireFailure("\n".join([text.rstrip()] + list(report["run_lines"])))
        extra = []  # a harness from before `run_lines`
        if report.get("adapter_broken"):
            b = report["adapter_broken"]
            extra.append(f"adapter broken: every one of the {b['valid_cases_ran']} valid cases that ran "
                         f"errored ({b['count']} with the same message): {b['error']}")
        variants = report.get("overall_variants")
        if variants:
            extra.append("overall: the failures are explained by variant(s) "
                         + ", ".join(f"`{v}`" for v in variants))
        if report.get("overall_convention"):
            f = report["overall_convention"]
            extra.append(f"overall: every failing case follows future keys `{f}`, not the declared "
                         f"`{report['future_keys']}`; if intended, pass --fire-future-keys {f}")
        if report.get("overall_gradients"):
            what = ("missing or shaped otherwise than the case's" if report.get("overall_gradients_layout")
                    else "wrong")
            extra.append("overall: only gradient cases fail; the gradient(s) of "
                         + ", ".join(f"`{g}`" for g in report["overall_gradients"]) + f" are {what}")
        raise FireFailure("\n".join([text.rstrip()] + extra))

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, FireFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"fire-conformance: {self.name}"


_REPORTS = pytest.StashKey()


def pytest_pycollect_makeitem(collector, name, obj):
    if isinstance(obj, FireCases):
        base = os.path.dirname(str(collector.path))
        return FireSuite.from_parent(collector, name=name).setup_settings(obj.settings, base)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """``--fire-impl`` / ``--fire-glue`` / ``--fire-cmd``: a suite of items beside the collected
    tests, added before ``-k`` and ``-m`` select."""
    s = _cli_settings(config)
    if not (s["impl"] or s["glue"] or s["cmd"]):
        return
    suite = FireSuite.from_parent(session, name="fire-conformance", nodeid="fire-conformance")
    suite.setup_settings(s, str(config.invocation_params.dir))
    items.extend(suite.collect())


def pytest_report_header(config):
    s = _cli_settings(config)
    if s["impl"] or s["glue"] or s["cmd"]:
        return f"fire-conformance: {s['impl'] or s['glue'] or s['cmd']}"
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for nodeid, r in config.stash.get(_REPORTS, []):
        tr = terminalreporter
        tr.write_sep("-", f"fire-conformance report ({nodeid})")
        tr.write_line(f"`{r['implementation']}` (dtype {r['dtype']}) against suite {r['suite_version']} "
                      f"(manifest {r['suite_manifest_sha256'][:12]}, {r.get('suite_source', '?')})")
        for q in ("values", "validation"):
            v = r[q]
            tr.write_line(f"{q + ':':<11} {v['passed']} passed, {v['failed']} failed, {v['skipped']} skipped")
        if r.get("nothing_ran"):
            tr.write_line("nothing graded: every selected case of a counted verdict was skipped, "
                          "so this run proves nothing (the harness exits 5 for it, and so does "
                          "pytest here)")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """A harness run that graded nothing (every selected case skipped: a module that cannot
    compute in the dtype asked, a ``-k`` that picks only cases it skips) proves nothing; the
    harness exits 5 for it, and a pytest run of it must not exit 0 either."""
    reports = session.config.stash.get(_REPORTS, [])
    if exitstatus == 0 and any(r.get("nothing_ran") for _, r in reports):
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
