//! `fire-conformance`: generate the golden vectors, and check implementations against them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

use fire_conformance::implementation::Implementation;
use fire_conformance::implementations::{external, reference::Reference};
use fire_conformance::report;
use fire_conformance::runner::{self, Options};
use fire_conformance::vectors::{generate, load};

#[derive(Parser)]
#[command(
    name = "fire-conformance",
    version,
    about = "Golden vectors for FIRE and a harness that checks any implementation against them"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Regenerate the vectors from the reference (or, with --check, fail on any drift).
    Generate {
        /// Where to write (default: the suite folder).
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
        /// Misbehave on every case: crash, hang, garbage, nan, wrong-shape, wrong-id, flood, bare-nan.
        #[arg(long)]
        misbehave: Option<String>,
    },
    /// Export the suite with a minimal pytest loader example.
    Copy {
        /// Target folder (created).
        dir: PathBuf,
        /// The suite to export.
        #[arg(long)]
        vectors: Option<PathBuf>,
    },
}

#[derive(Args)]
struct Common {
    /// The suite folder (default: ./vectors, or the repository's).
    #[arg(long)]
    vectors: Option<PathBuf>,
    /// Run only cases whose id matches one of these globs.
    #[arg(long = "run", value_name = "GLOB")]
    run: Vec<String>,
    /// Skip cases whose id matches one of these globs.
    #[arg(long = "skip", value_name = "GLOB")]
    skip: Vec<String>,
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
}

#[derive(Args)]
struct RunArgs {
    /// The implementation's command line, run through `sh -c` (default: the built-in reference).
    #[arg(long = "impl", value_name = "CMD")]
    implementation: Option<String>,
    /// A built-in implementation: `reference` (default), `fast` (feature `fast`: the kernels,
    /// compiled FIRE, fused attention, fused backward) or `accelerated` (feature `accelerated`:
    /// the candle modules).
    #[arg(long, default_value = "reference")]
    builtin: String,
    /// A command run once before the implementation starts.
    #[arg(long, value_name = "CMD")]
    setup: Option<String>,
    /// Seconds allowed per case.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Seconds allowed for start-up and the handshake.
    #[arg(long, default_value_t = 120.0)]
    startup_timeout: f64,
    #[command(flatten)]
    common: Common,
}

fn suite_dir(given: Option<PathBuf>) -> PathBuf {
    given
        .or_else(|| std::env::var_os("FIRE_VECTORS").map(PathBuf::from))
        .unwrap_or_else(|| {
            let here = PathBuf::from("vectors");
            if here.join("MANIFEST.yaml").exists() {
                here
            } else {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")
            }
        })
}

fn options(c: &Common) -> Result<Options> {
    let xfails = match &c.xfails {
        Some(p) => runner::read_xfails(
            &fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        ),
        None => vec![],
    };
    Ok(Options {
        run: c.run.clone(),
        skip: c.skip.clone(),
        xfails,
        dtype: c.dtype.clone(),
        diagnose: !c.no_diagnose,
    })
}

fn finish(r: &runner::Report, c: &Common) -> Result<ExitCode> {
    if let Some(path) = &c.junit {
        fs::write(path, report::junit::render(r))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if c.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report::json::render(r))?
        );
        eprintln!("{}", r.summary());
    } else {
        print!("{}", report::text::render(r, c.verbose));
    }
    let (_, failed, _) = r.counts();
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn run(args: RunArgs) -> Result<ExitCode> {
    let suite = load::load(&suite_dir(args.common.vectors.clone()))?;
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
            #[cfg(feature = "accelerated")]
            "accelerated" => Box::new(fire_conformance::implementations::accelerated::Accelerated),
            #[cfg(feature = "fast")]
            "fast" => Box::new(fire_conformance::implementations::fast::Fast),
            other => bail!("unknown built-in implementation `{other}` (reference; fast needs the `fast` feature, accelerated the `accelerated` feature)"),
        },
        Some(cmd) => Box::new(external::External::new(
            cmd,
            external::Limits {
                case: Duration::from_secs_f64(args.timeout),
                startup: Duration::from_secs_f64(args.startup_timeout),
                ..Default::default()
            },
        )),
    };
    let report = runner::run(&suite, imp.as_mut(), &options(&args.common)?)?;
    finish(&report, &args.common)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate { out, check } => {
            let dir = suite_dir(out);
            if check {
                generate::check(&dir).map(|n| {
                    println!("{n} files regenerate byte-identically in {}", dir.display());
                    ExitCode::SUCCESS
                })
            } else {
                generate::write(&dir).map(|n| {
                    println!("wrote {n} files to {}", dir.display());
                    ExitCode::SUCCESS
                })
            }
        }
        Command::Run(args) => run(args),
        Command::Check { results, common } => (|| {
            let suite = load::load(&suite_dir(common.vectors.clone()))?;
            let text = fs::read_to_string(&results)
                .with_context(|| format!("reading {}", results.display()))?;
            let mut imp = external::Recorded::parse(&text)?;
            let report = runner::run(&suite, &mut imp, &options(&common)?)?;
            finish(&report, &common)
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
                    let v = fire_reference::fire::variants::find(&v)
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
        Command::Copy { dir, vectors } => fire_conformance::export::copy(&suite_dir(vectors), &dir)
            .map(|n| {
                println!("exported {n} files to {}", dir.display());
                ExitCode::SUCCESS
            }),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
