//! `fire-conformance`: generate the golden vectors, and check implementations against them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};

use fire_conformance::generate;
use fire_conformance::implementation::Implementation;
use fire_conformance::implementations::mutant::{Arithmetic, Mutant};
use fire_conformance::implementations::{external, reference::Reference};
use fire_conformance::report;
use fire_conformance::runner::{self, exit, FailOn, Options};
use fire_conformance::vectors::load::{Origin, Suite};
use fire_conformance::vectors::{embedded, load};

#[derive(Parser)]
#[command(
    name = "fire-conformance",
    version,
    about = "Golden vectors for FIRE and a harness that checks any implementation against them",
    after_help = "Exit status of `run` and `check`: 0 every graded case of the counted verdicts passed; \
1 a counted case failed; 2 usage error or unreadable input (bad flags, malformed suite or results, failed \
--setup, no handshake); 3 the adapter is broken (every valid case errored); 5 nothing was graded (no case \
matched the selection, or every selected case was skipped)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Regenerate the vectors from the reference (or, with --check, fail on any drift): a
    /// developer command for the repository's `vectors/` folder.
    Generate {
        /// The folder to write or check (default: `FIRE_VECTORS`, else `./vectors` when it holds
        /// a MANIFEST.yaml, else the `vectors/` of the source tree this binary was built from;
        /// the folder used is printed).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Regenerate into a temporary folder and compare byte for byte.
        #[arg(long)]
        check: bool,
    },
    /// Check an implementation: the built-in reference, or `--impl CMD` over the protocol.
    Run(RunArgs),
    /// Check a results file (JSON lines of protocol replies) written without the harness.
    Check {
        /// The results file.
        #[arg(long)]
        results: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Serve a built-in implementation over the protocol on stdin/stdout (for testing the
    /// subprocess path: `run --impl "fire-conformance serve"`).
    Serve {
        /// Serve the reference through this catalogued variant (a deliberate mistake).
        #[arg(long)]
        variant: Option<String>,
        /// Misbehave on every case: crash, hang, garbage, nan, wrong-shape, wrong-id, misnamed,
        /// flood, bare-nan; or slow-start (3 s over the first case, then correct).
        #[arg(long)]
        misbehave: Option<String>,
    },
    /// Export the suite with a minimal pytest loader example.
    Copy {
        /// Target folder (created).
        dir: PathBuf,
        /// The suite to export (default: `FIRE_VECTORS`, else the embedded suite).
        #[arg(long)]
        vectors: Option<PathBuf>,
    },
    /// List the suite's cases (id, family, kind, valid or invalid, flags, clauses): what a
    /// test runner needs to make one test item per case before running them.
    List {
        #[command(flatten)]
        select: Select,
        /// Print JSON (`{"suite": {...}, "cases": [...]}`) instead of one id per line.
        #[arg(long)]
        json: bool,
    },
}

/// Which suite, and which of its cases: shared by `run`, `check` and `list`.
#[derive(Args)]
struct Select {
    /// A suite folder to use instead of the suite embedded in this binary (also `FIRE_VECTORS`).
    #[arg(long)]
    vectors: Option<PathBuf>,
    /// Only cases whose id matches one of these globs.
    #[arg(long = "run", value_name = "GLOB")]
    run: Vec<String>,
    /// Leave out cases whose id matches one of these globs.
    #[arg(long = "skip", value_name = "GLOB")]
    skip: Vec<String>,
}

#[derive(Args)]
struct Common {
    #[command(flatten)]
    select: Select,
    /// A file of case-id globs expected to fail (one per line, # comments).
    #[arg(long)]
    xfails: Option<PathBuf>,
    /// The dtype to run in (default: the implementation's first).
    #[arg(long)]
    dtype: Option<String>,
    /// Print the JSON report on stdout (the summary line goes to stderr).
    #[arg(long)]
    json: bool,
    /// Also write a JUnit XML report.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// List passing and skipped cases too.
    #[arg(short, long)]
    verbose: bool,
    /// Do not try the catalogue of variants on failures.
    #[arg(long)]
    no_diagnose: bool,
    /// Which verdicts decide the exit status: `values` (bias, attention, gradients),
    /// `validation` (invalid inputs rejected) or `both`.
    #[arg(long, value_enum, default_value_t = Verdicts::Both)]
    fail_on: Verdicts,
}

/// `--fail-on`.
#[derive(Clone, Copy, ValueEnum)]
enum Verdicts {
    Both,
    Values,
    Validation,
}

impl From<Verdicts> for FailOn {
    fn from(v: Verdicts) -> Self {
        match v {
            Verdicts::Both => FailOn::Both,
            Verdicts::Values => FailOn::Values,
            Verdicts::Validation => FailOn::Validation,
        }
    }
}

#[derive(Args)]
struct RunArgs {
    /// The implementation's command line, run through `sh -c` (default: the built-in reference).
    #[arg(long = "impl", value_name = "CMD")]
    implementation: Option<String>,
    /// A built-in implementation: `reference` (default); `mutant` (an independent f32 or f64
    /// implementation, per --dtype) or `mutant:VARIANT` (the same making one catalogued mistake);
    /// `fast` (feature `fast`: the kernels, compiled FIRE, fused attention, fused backward) or
    /// `accelerated` (feature `accelerated`: the candle modules).
    #[arg(long, default_value = "reference")]
    builtin: String,
    /// A command run once before the implementation starts.
    #[arg(long, value_name = "CMD")]
    setup: Option<String>,
    /// Seconds allowed per case.
    #[arg(long, default_value_t = 30.0, value_parser = seconds)]
    timeout: f64,
    /// Seconds allowed for start-up and the handshake, and for a process's first case, where
    /// JIT compilation lands (until a first case has once hung or crashed).
    #[arg(long, default_value_t = 120.0, value_parser = seconds)]
    startup_timeout: f64,
    /// The implementation's address-space limit in MiB, inherited by every process it starts
    /// (default: half the machine's memory; 0: no limit).
    #[arg(long, value_name = "MIB")]
    memory_limit: Option<u64>,
    #[command(flatten)]
    common: Common,
}

/// The suite to check against: `--vectors DIR`, else `FIRE_VECTORS`, else the suite compiled
/// into this binary, so that an installed harness runs from any directory. spec: [proto.suite]
fn suite(given: Option<PathBuf>) -> Result<Suite> {
    match given.or_else(|| std::env::var_os("FIRE_VECTORS").map(PathBuf::from)) {
        Some(dir) => {
            load::load(&dir).with_context(|| format!("loading the suite in {}", dir.display()))
        }
        None => embedded::load().context("loading the embedded suite (a corrupt build)"),
    }
}

/// The folder `generate` writes or checks: `--out`, else `FIRE_VECTORS`, else `./vectors` when
/// it is a suite (the repository root), else the source tree this binary was built from when it
/// is still there. Anything else is an error rather than a guess: `generate` rewrites files.
fn generate_dir(given: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(dir) = given.or_else(|| std::env::var_os("FIRE_VECTORS").map(PathBuf::from)) {
        return Ok(dir);
    }
    let here = PathBuf::from("vectors");
    if here.join("MANIFEST.yaml").is_file() {
        return Ok(here);
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors");
    if source.join("MANIFEST.yaml").is_file() {
        return Ok(source);
    }
    bail!(
        "no vectors folder here: `generate` writes the repository's `vectors/`; run it from the \
         repository root or pass --out DIR (running a suite needs no folder: `run` uses the \
         suite embedded in this binary)"
    )
}

/// One line naming the suite's origin, for the text report (the JSON carries `suite_source`).
fn origin_line(s: &Suite) -> String {
    let cases: usize = s.files.iter().map(|(_, f)| f.cases.len()).sum();
    let origin = match &s.origin {
        Origin::Embedded => format!("embedded in fire-conformance {}", env!("CARGO_PKG_VERSION")),
        Origin::Dir(d) => d.display().to_string(),
    };
    format!(
        "suite: {origin} ({} files, {cases} cases, {})",
        s.files.len(),
        report::text::short(&s.hash)
    )
}

/// Writes a report to standard output. A reader that stops early (`| head`) is not an error:
/// the report was for it, and the exit status still tells the verdict.
fn emit(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("writing to standard output")
        }
        _ => Ok(()),
    }
}

fn options(c: &Common, suite: &Suite) -> Result<Options> {
    let xfails = match &c.xfails {
        Some(p) => runner::read_xfails(
            &fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        ),
        None => vec![],
    };
    // A listed case that passes fails the run, so the list cannot rot that way; an entry that
    // matches no case at all (a renamed case, a typo) would rot silently.
    for x in &xfails {
        let globs = runner::globs(std::slice::from_ref(x))?;
        if !suite.cases().any(|case| globs.is_match(&case.id)) {
            eprintln!("warning: --xfails entry `{x}` matches no case of the suite");
        }
    }
    Ok(Options {
        run: c.select.run.clone(),
        skip: c.select.skip.clone(),
        xfails,
        dtype: c.dtype.clone(),
        diagnose: !c.no_diagnose,
        fail_on: c.fail_on.into(),
    })
}

fn finish(suite: &Suite, r: &runner::Report, c: &Common) -> Result<ExitCode> {
    if let Some(path) = &c.junit {
        fs::write(path, report::junit::render(r))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if c.json {
        let mut json = report::json::render(r);
        json["suite_source"] = suite.origin.to_string().into();
        // Each case's block of the text report, so that a test runner shows a failure exactly
        // as the harness words it (pytest plugin) without rendering reports of its own.
        if let Some(cases) = json["cases"].as_array_mut() {
            for (v, o) in cases.iter_mut().zip(&r.outcomes) {
                if v["id"] == o.id.as_str() {
                    let mut block = String::new();
                    report::text::case(&mut block, o);
                    v["report"] = block.into();
                }
            }
        }
        emit(&format!("{}\n", serde_json::to_string_pretty(&json)?))?;
        eprintln!("{}", r.summary());
    } else {
        emit(&format!(
            "{}\n{}",
            origin_line(suite),
            report::text::render(r, c.verbose)
        ))?;
    }
    Ok(ExitCode::from(r.exit_code()))
}

fn run(args: RunArgs) -> Result<ExitCode> {
    let suite = suite(args.common.select.vectors.clone())?;
    if let Some(setup) = &args.setup {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(setup)
            .status()
            .context("running --setup")?;
        if !status.success() {
            bail!("--setup `{setup}` failed with {status}");
        }
    }
    let mut imp: Box<dyn Implementation> = match &args.implementation {
        None => match args.builtin.as_str() {
            "reference" => Box::new(Reference),
            m if m == "mutant" || m.starts_with("mutant:") => {
                let arithmetic = match args.common.dtype.as_deref() {
                    None | Some("f32") => Arithmetic::F32,
                    Some("f64") => Arithmetic::F64,
                    Some(d) => bail!("a mutant computes in f32 or f64, not `{d}`"),
                };
                Box::new(
                    Mutant::new(m.strip_prefix("mutant:"), arithmetic)
                        .map_err(|e| anyhow::anyhow!("--builtin {m}: {e}"))?,
                )
            }
            #[cfg(feature = "accelerated")]
            "accelerated" => Box::new(fire_conformance::implementations::accelerated::Accelerated),
            #[cfg(feature = "fast")]
            "fast" => Box::new(fire_conformance::implementations::fast::Fast),
            other => bail!("unknown built-in implementation `{other}` (reference, mutant or mutant:VARIANT; fast needs the `fast` feature, accelerated the `accelerated` feature)"),
        },
        Some(cmd) => Box::new(external::External::new(
            cmd,
            external::Limits {
                case: Duration::from_secs_f64(args.timeout),
                startup: Duration::from_secs_f64(args.startup_timeout),
                memory_mib: match args.memory_limit {
                    Some(0) => None,
                    Some(mib) => Some(mib),
                    None => Some(external::default_memory_mib()),
                },
                ..Default::default()
            },
        )),
    };
    let report = runner::run(&suite, imp.as_mut(), &options(&args.common, &suite)?)?;
    finish(&suite, &report, &args.common)
}

/// `list`: the selected cases, as ids or JSON.
fn list(select: Select, json: bool) -> Result<ExitCode> {
    let Select { vectors, run, skip } = select;
    let suite = suite(vectors)?;
    let (run, skip) = (&run[..], &skip[..]);
    let (runs, skips) = (runner::globs(run)?, runner::globs(skip)?);
    let selected: Vec<_> = suite
        .cases()
        .filter(|c| (run.is_empty() || runs.is_match(&c.id)) && !skips.is_match(&c.id))
        .collect();
    if json {
        let cases: Vec<serde_json::Value> = selected
            .iter()
            .map(|c| {
                serde_json::json!({
                    "id": c.id,
                    "family": c.id.split('/').next().unwrap_or_default(),
                    "kind": c.kind.name(),
                    "result": match c.result {
                        fire_conformance::vectors::format::Verdict::Valid => "valid",
                        fire_conformance::vectors::format::Verdict::Invalid => "invalid",
                    },
                    "question": runner::Question::of(c.result).name(),
                    "description": c.description,
                    "flags": c.flags.iter().map(|f| f.name()).collect::<Vec<_>>(),
                    "clauses": c.clauses,
                    "profile": c.profile,
                })
            })
            .collect();
        let out = serde_json::json!({
            "suite": {
                "version": suite.manifest.suite_version,
                "manifest_sha256": suite.hash,
                "source": suite.origin.to_string(),
            },
            "cases": cases,
        });
        emit(&format!("{}\n", serde_json::to_string_pretty(&out)?))?;
    } else {
        emit(
            &selected
                .iter()
                .map(|c| format!("{}\n", c.id))
                .collect::<String>(),
        )?;
        eprintln!(
            "{} of {} cases; {}",
            selected.len(),
            suite.cases().count(),
            origin_line(&suite)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `copy`: a folder suite is exported as it is; the embedded one is first written out to a
/// temporary folder, then exported through the same verified path.
fn copy(vectors: Option<PathBuf>, dir: &Path) -> Result<ExitCode> {
    let given = vectors.or_else(|| std::env::var_os("FIRE_VECTORS").map(PathBuf::from));
    let staged;
    let from = match given {
        Some(d) => d,
        None => {
            staged = tempfile::tempdir().context("creating a temporary folder")?;
            for (rel, bytes) in embedded::FILES {
                let target = staged.path().join(rel);
                if let Some(parent) = target.parent() {
                    fs::create_dir_all(parent)?;
                }
                fs::write(&target, bytes)
                    .with_context(|| format!("writing {}", target.display()))?;
            }
            staged.path().to_path_buf()
        }
    };
    let n = fire_conformance::export::copy(&from, dir)
        .with_context(|| format!("exporting the suite to {}", dir.display()))?;
    println!("exported {n} files to {}", dir.display());
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate { out, check } => generate_dir(out).and_then(|dir| {
            if check {
                let n = generate::check(&dir)?;
                println!("{n} files regenerate byte-identically in {}", dir.display());
            } else {
                let n = generate::write(&dir)?;
                println!("wrote {n} files to {}", dir.display());
            }
            Ok(ExitCode::SUCCESS)
        }),
        Command::Run(args) => run(args),
        Command::Check { results, common } => (|| {
            let suite = suite(common.select.vectors.clone())?;
            let text = fs::read_to_string(&results)
                .with_context(|| format!("reading {}", results.display()))?;
            let mut imp = external::Recorded::parse(&text)
                .with_context(|| format!("{}", results.display()))?;
            let unknown = imp.ids_not_in(&suite);
            if let Some(first) = unknown.first() {
                eprintln!(
                    "warning: {} result(s) in {} are for no case of this suite (suite {}), e.g. `{first}`: a typo in an id, or results for another suite version; they are not graded",
                    unknown.len(),
                    results.display(),
                    suite.manifest.suite_version
                );
            }
            let report = runner::run(&suite, &mut imp, &options(&common, &suite)?)?;
            if !imp.has_hello() && common.dtype.is_none() && report.counts().1 > 0 {
                eprintln!(
                    "note: {} has no hello line, so its results were graded as f64; if they were computed in another dtype, say so with --dtype",
                    results.display()
                );
            }
            finish(&suite, &report, &common)
        })(),
        Command::Serve { variant, misbehave } => (|| {
            let misbehave = match misbehave {
                None => None,
                Some(m) => Some(
                    fire_conformance::serve::Misbehaviour::parse(&m)
                        .ok_or_else(|| anyhow::anyhow!("unknown misbehaviour `{m}`"))?,
                ),
            };
            let mut imp: Box<dyn Implementation> = match variant {
                None => Box::new(Reference),
                Some(v) => {
                    let v = fire_reference::variants::find(&v)
                        .ok_or_else(|| anyhow::anyhow!("unknown variant `{v}`"))?;
                    Box::new(fire_conformance::implementations::variant::Mistaken(v))
                }
            };
            let stdin = std::io::stdin();
            fire_conformance::serve::serve(
                imp.as_mut(),
                stdin.lock(),
                std::io::stdout().lock(),
                misbehave,
            )?;
            Ok(ExitCode::SUCCESS)
        })(),
        Command::Copy { dir, vectors } => copy(vectors, &dir),
        Command::List { select, json } => list(select, json),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit::ERROR)
        }
    }
}

/// A timeout: a positive, finite number of seconds that a [`Duration`] holds (NaN, infinities,
/// zero, negatives and 1e300 are usage errors, not a panic or a run in which nothing can reply).
fn seconds(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|e| format!("`{text}` is not a number of seconds ({e})"))?;
    if value > 0.0 && Duration::try_from_secs_f64(value).is_ok() {
        Ok(value)
    } else {
        Err(format!(
            "`{text}`: must be a positive, finite number of seconds"
        ))
    }
}
