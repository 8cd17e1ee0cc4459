//! An implementation in another process, spoken to in JSON lines over stdin/stdout.
//!
//! The process is hostile until proven otherwise: a crash restarts it and fails the case, a hang
//! times out, garbage, a wrong shape or a reply for another case fails the case, and a flood of
//! output hits a size cap. None of them takes the harness down. spec: [proto.framing],
//! [proto.lifecycle]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::error::Error;
use crate::implementation::{Capabilities, Implementation, Reply, Request};
use crate::protocol;

/// Time and size limits. spec: [proto.lifecycle]
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Per case.
    pub case: Duration,
    /// For start-up and the handshake; also the allowance of a process's first case (at least
    /// `case`), where JIT compilation lands (`torch.compile`, `jax.jit`, CUDA start-up), until a
    /// first case has once failed to come back. spec: [proto.lifecycle]
    pub startup: Duration,
    /// The longest line accepted, in bytes.
    pub max_line: usize,
    /// Consecutive failed (re)starts before every remaining case fails at once.
    pub max_failed_starts: usize,
    /// The implementation's address-space limit in MiB (`ulimit -v`, inherited by everything it
    /// starts); `None` for no limit. An implementation that allocates without bound gets an
    /// allocation failure (an `errored` reply or a crash, both failed cases) instead of taking
    /// the machine down.
    pub memory_mib: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            case: Duration::from_secs(30),
            startup: Duration::from_secs(120),
            max_line: 16 << 20,
            max_failed_starts: 3,
            memory_mib: Some(default_memory_mib()),
        }
    }
}

/// Half the machine's memory (at least 2 GiB), or 8 GiB where it cannot be read: enough for
/// PyTorch or JAX on CPU, little enough to leave the harness and the machine alive.
pub fn default_memory_mib() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
    });
    total.map_or(8192, |kb| (kb / 1024 / 2).max(2048))
}

enum Line {
    Text(String),
    TooLong,
    Eof,
    Failed(String),
}

struct Process {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Line>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Whether a request has been sent: the first one carries the warm-up allowance.
    asked: bool,
}

const STDERR_TAIL: usize = 2000;

fn read_lines(out: impl Read, cap: usize, tx: mpsc::Sender<Line>) {
    let mut r = BufReader::new(out);
    loop {
        let mut line = Vec::new();
        let done = loop {
            let buf = match r.fill_buf() {
                Ok(b) => b,
                Err(e) => break Some(Line::Failed(e.to_string())),
            };
            if buf.is_empty() {
                break Some(if line.is_empty() {
                    Line::Eof
                } else {
                    Line::Text(String::from_utf8_lossy(&line).into_owned())
                });
            }
            let (take, end) = match buf.iter().position(|&b| b == b'\n') {
                Some(n) => (n + 1, true),
                None => (buf.len(), false),
            };
            line.extend_from_slice(&buf[..take]);
            r.consume(take);
            if line.len() > cap {
                break Some(Line::TooLong);
            }
            if end {
                line.pop();
                break None;
            }
        };
        let stop = done.is_some();
        let msg = done.unwrap_or_else(|| Line::Text(String::from_utf8_lossy(&line).into_owned()));
        let stop = stop || matches!(msg, Line::TooLong);
        if tx.send(msg).is_err() || stop {
            return;
        }
    }
}

fn drain_stderr(err: impl Read, keep: Arc<Mutex<Vec<u8>>>) {
    let mut r = BufReader::new(err);
    let mut buf = [0u8; 4096];
    while let Ok(n) = r.read(&mut buf) {
        if n == 0 {
            return;
        }
        if let Ok(mut k) = keep.lock() {
            k.extend_from_slice(&buf[..n]);
            let excess = k.len().saturating_sub(STDERR_TAIL);
            k.drain(..excess);
        }
    }
}

impl Process {
    fn spawn(cmd: &str, cap: usize, memory_mib: Option<u64>) -> std::io::Result<Self> {
        // The limit is set by the shell that runs the command, so no unsafe `pre_exec` is needed;
        // every process it starts inherits it.
        let script = match memory_mib {
            Some(mib) => format!("ulimit -v {} || exit 97\n{cmd}", mib.saturating_mul(1024)),
            None => cmd.to_owned(),
        };
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command.spawn()?;
        let (tx, lines) = mpsc::channel();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        if let Some(out) = child.stdout.take() {
            thread::spawn(move || read_lines(out, cap, tx));
        }
        if let Some(err) = child.stderr.take() {
            let keep = Arc::clone(&stderr);
            thread::spawn(move || drain_stderr(err, keep));
        }
        Ok(Self {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            asked: false,
        })
    }

    fn send(&mut self, line: &str) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::other("stdin closed"))?;
        stdin.write_all(line.as_bytes())?;
        stdin.write_all(b"\n")?;
        stdin.flush()
    }

    fn stderr_tail(&self) -> String {
        let tail = self
            .stderr
            .lock()
            .map(|k| String::from_utf8_lossy(&k).into_owned())
            .unwrap_or_default();
        let tail = tail.trim();
        if tail.is_empty() {
            String::new()
        } else {
            format!(
                "; stderr ends: {}",
                tail.lines()
                    .rev()
                    .take(5)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join(" | ")
            )
        }
    }

    fn kill(&mut self) {
        // The whole process group (`sh -c` and whatever it started, including children it left
        // running), but only while its leader is unreaped: a reaped pid may already name someone
        // else's group. `try_wait` would reap, so liveness is read from /proc instead (a zombie
        // leader still holds the pid). The `--` matters: without it procps `kill` does not read
        // `-PGID` as a process group.
        if self.leader_unreaped() {
            let _ = Command::new("kill")
                .args(["-s", "KILL", "--", &format!("-{}", self.child.id())])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// True while the group leader's pid is still ours (running or a zombie not yet waited for).
    fn leader_unreaped(&mut self) -> bool {
        if std::path::Path::new("/proc/self").exists() {
            std::path::Path::new(&format!("/proc/{}", self.child.id())).exists()
        } else {
            matches!(self.child.try_wait(), Ok(None))
        }
    }

    /// True once the leader has exited (it may be a zombie: it is not reaped here).
    fn leader_exited(&mut self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()));
        match stat {
            // The state follows the parenthesised command name.
            Ok(s) => s
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
            Err(_) => true,
        }
    }

    /// Whether the process has exited with status 0.
    fn exited_cleanly(&mut self) -> bool {
        self.child
            .try_wait()
            .ok()
            .flatten()
            .is_some_and(|s| s.success())
    }

    /// Waits for one line; `Err` carries why none came (`hint` follows a timeout's message).
    fn receive(&mut self, timeout: Duration, hint: &str) -> Result<String, String> {
        match self.lines.recv_timeout(timeout) {
            Ok(Line::Text(t)) => Ok(t),
            Ok(Line::TooLong) => {
                Err("reply exceeds the size cap (flood?); the implementation was restarted".into())
            }
            Ok(Line::Failed(e)) => Err(format!("reading the implementation's output failed: {e}")),
            Ok(Line::Eof) | Err(RecvTimeoutError::Disconnected) => {
                thread::sleep(Duration::from_millis(50));
                let status = self
                    .child
                    .try_wait()
                    .ok()
                    .flatten()
                    .map_or("still running".into(), |s| s.to_string());
                Err(format!(
                    "the implementation closed its output (crashed? exit: {status}){}",
                    self.stderr_tail()
                ))
            }
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "no reply within {:.1}s{hint}; the implementation was restarted",
                timeout.as_secs_f64()
            )),
        }
    }
}

/// A subprocess implementation.
pub struct External {
    cmd: String,
    limits: Limits,
    process: Option<Process>,
    failed_starts: usize,
    /// Set once a process's first case came back broken (a hang, a crash): from then on every
    /// case has the plain per-case limit, so a hanging implementation costs `case`, not
    /// `startup`, per case.
    warm_up_failed: bool,
    suite_version: String,
    /// The note of the last reply, until the runner takes it. spec: [proto.reply]
    note: Option<String>,
}

impl std::fmt::Debug for External {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("External").field("cmd", &self.cmd).finish()
    }
}

impl External {
    /// An implementation started by `sh -c cmd` when first needed.
    pub fn new(cmd: &str, limits: Limits) -> Self {
        Self {
            cmd: cmd.into(),
            limits,
            process: None,
            failed_starts: 0,
            note: None,
            warm_up_failed: false,
            suite_version: crate::vectors::manifest::SUITE_VERSION.into(),
        }
    }

    fn start(&mut self) -> Result<Capabilities, String> {
        let mut p = Process::spawn(&self.cmd, self.limits.max_line, self.limits.memory_mib)
            .map_err(|e| format!("cannot start `{}`: {e}", self.cmd))?;
        // A process that already exited may still have said something: read before blaming
        // the broken pipe.
        let sent = p.send(&protocol::hello(&self.suite_version, self.limits.case));
        let wait = if sent.is_ok() {
            self.limits.startup
        } else {
            Duration::from_millis(500)
        };
        let hello = match (p.receive(wait, " (hang?)"), sent) {
            (Ok(line), _) => protocol::parse_hello(&line),
            (Err(e), Ok(())) => Err(e),
            (Err(e), Err(w)) => Err(format!("cannot write the handshake ({w}); {e}")),
        };
        match hello {
            Ok(caps) => {
                self.process = Some(p);
                self.failed_starts = 0;
                Ok(caps)
            }
            Err(e) => {
                // A script that ran to its end without a word: most often a glue file whose
                // `build(case)` nothing serves.
                let hint = if p.exited_cleanly() {
                    "; it exited with status 0 without saying hello: a file that defines \
                     `build(case)` runs as `python -m fire_conformance.glue FILE`, or ends with \
                     `fire_conformance.kit.serve(build, name=...)` [proto.hello]"
                } else {
                    ""
                };
                p.kill();
                self.failed_starts += 1;
                Err(format!("handshake failed: {e}{hint}"))
            }
        }
    }

    fn drop_process(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
    }
}

impl Implementation for External {
    fn capabilities(&mut self) -> crate::error::Result<Capabilities> {
        self.start()
            .map_err(|e| Error::Handshake(format!("`{}`: {e}", self.cmd)))
    }

    fn run(&mut self, request: &Request) -> Reply {
        self.note = None;
        if self.process.is_none() {
            if self.failed_starts >= self.limits.max_failed_starts {
                return Reply::Broken(format!(
                    "gave up after {} failed restarts",
                    self.failed_starts
                ));
            }
            if let Err(e) = self.start() {
                return Reply::Broken(format!("restart failed: {e}"));
            }
        }
        let Some(p) = self.process.as_mut() else {
            return Reply::Broken("no process".into());
        };
        // The first case after a start may pay for compilation; a hang pays it only once.
        let first = !std::mem::replace(&mut p.asked, true);
        let (wait, hint) = if first && !self.warm_up_failed {
            (
                self.limits.case.max(self.limits.startup),
                " to the first case, which has the start-up allowance (--startup-timeout) for \
                 compilation (hang?)",
            )
        } else {
            (
                self.limits.case,
                " (hang? a case that needs longer needs a larger --timeout)",
            )
        };
        let line = match p.send(&protocol::request(request)) {
            Ok(()) => p.receive(wait, hint),
            Err(_) => p.receive(Duration::from_millis(500), "").and_then(|_| {
                Err("the implementation stopped reading its input (crashed?)".into())
            }),
        };
        let reply = match line {
            Ok(line) => {
                let (reply, note) = protocol::parse_reply(&line, &request.id);
                self.note = note;
                reply
            }
            Err(e) => Reply::Broken(e),
        };
        if let Reply::Broken(_) = reply {
            self.warm_up_failed |= first;
            // The stream may be out of step: start afresh for the next case.
            self.drop_process();
        }
        reply
    }

    fn take_note(&mut self) -> Option<String> {
        self.note.take()
    }
}

impl Drop for External {
    /// Says bye, gives the implementation half a second to leave, then kills its whole process
    /// group, so children it started and left running (orphans) go with it. spec: [proto.lifecycle]
    fn drop(&mut self) {
        if let Some(mut p) = self.process.take() {
            let _ = p.send(&protocol::bye());
            p.stdin = None;
            for _ in 0..20 {
                if p.leader_exited() {
                    break;
                }
                thread::sleep(Duration::from_millis(25));
            }
            p.kill();
        }
    }
}

/// Replies recorded in a file (`check --results`): an optional hello line, then result lines.
/// spec: [proto.results]
#[derive(Debug, Clone)]
pub struct Recorded {
    caps: Capabilities,
    replies: BTreeMap<String, (Reply, Option<String>)>,
    hello: bool,
    note: Option<String>,
}

impl Recorded {
    /// Reads a results file; a malformed line is an error naming its number.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = |line: usize, reason: String| Error::Results { line, reason };
        let mut caps = Capabilities {
            name: "results file".into(),
            families: vec!["*".into()],
            // Without a hello line the file says nothing of its dtype: `--dtype` does (f64,
            // the first, when it is not given).
            dtypes: vec!["f64".into(), "f32".into(), "bf16".into()],
            future_keys: Default::default(),
            placement: Default::default(),
            positions: Default::default(),
            state: Default::default(),
        };
        let mut replies = BTreeMap::new();
        let mut hello = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            if n == 0 && line.contains("\"hello\"") {
                caps = protocol::parse_hello(line).map_err(|e| bad(1, e.to_string()))?;
                hello = true;
                continue;
            }
            let a = protocol::parse_result(line).map_err(|e| bad(n + 1, e.to_string()))?;
            if replies.insert(a.id.clone(), (a.reply, a.note)).is_some() {
                return Err(bad(n + 1, format!("a second result for `{}`", a.id)));
            }
        }
        Ok(Self {
            caps,
            replies,
            hello,
            note: None,
        })
    }
}

impl Recorded {
    /// Whether the file starts with a hello line (which declares its dtypes and conventions).
    pub fn has_hello(&self) -> bool {
        self.hello
    }

    /// The ids the file has results for that name no case of `suite`, sorted.
    pub fn ids_not_in(&self, suite: &crate::vectors::load::Suite) -> Vec<String> {
        let known: std::collections::BTreeSet<&str> =
            suite.cases().map(|c| c.id.as_str()).collect();
        self.replies
            .keys()
            .filter(|id| !known.contains(id.as_str()))
            .cloned()
            .collect()
    }
}

impl Implementation for Recorded {
    fn capabilities(&mut self) -> crate::error::Result<Capabilities> {
        Ok(self.caps.clone())
    }

    fn run(&mut self, request: &Request) -> Reply {
        let (reply, note) = self
            .replies
            .get(&request.id)
            .cloned()
            .unwrap_or_else(|| (Reply::Skipped("no result in the file".into()), None));
        self.note = note;
        reply
    }

    fn take_note(&mut self) -> Option<String> {
        self.note.take()
    }
}
