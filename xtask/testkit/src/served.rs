//! A server child that says it is ready through a file.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ourios_recoverable::lock;
use serde::Deserialize;

/// A guard against a hung child, never an ordering device: nothing waits this long when the
/// server works.
pub const GUARD: Duration = Duration::from_secs(60);

/// What a server writes to its `--ready-file` once it serves (the node: listener bound and
/// recovery finished). The file appears whole (written aside, then renamed).
#[derive(Debug, Clone, Deserialize)]
pub struct Ready {
    /// The address it listens on.
    pub listen: SocketAddr,
    /// The node's OTLP/gRPC address, when it serves one.
    #[serde(default)]
    pub grpc: Option<SocketAddr>,
    /// Its process id.
    pub pid: u32,
}

impl Ready {
    /// Reads a ready file; `None` while it is not there.
    pub fn read(path: &Path) -> Option<Result<Ready, String>> {
        let text = std::fs::read(path).ok()?;
        Some(
            serde_json::from_slice(&text)
                .map_err(|e| format!("ready file {}: {e}", path.display())),
        )
    }
}

/// A running server child. Dropping it kills the child (a failing assertion must not leave a
/// server behind) and removes its ready file.
#[derive(Debug)]
pub struct Served {
    child: Option<Child>,
    /// Its address, once [`Served::wait_ready`] or [`Served::poll_ready`] saw the ready file.
    pub addr: Option<SocketAddr>,
    ready_file: PathBuf,
    log: Arc<Mutex<Vec<String>>>,
    stderr: Option<JoinHandle<()>>,
}

/// Distinguishes the ready files of one process's children.
static CHILDREN: AtomicU64 = AtomicU64::new(0);

impl Served {
    /// Spawns `cmd` with `--ready-file <fresh path>` appended, without waiting. Its stderr is
    /// kept, and echoed to ours with `echo` as a prefix when given.
    pub fn spawn(mut cmd: Command, echo: Option<&str>) -> Result<Served, String> {
        let ready_file = std::env::temp_dir().join(format!(
            "ourios-ready-{}-{}-{:016x}.json",
            std::process::id(),
            // Relaxed: only uniqueness matters, and fetch_add is atomic in any ordering.
            CHILDREN.fetch_add(1, Ordering::Relaxed),
            fastrand::u64(..)
        ));
        let _ = std::fs::remove_file(&ready_file);
        let mut child = cmd
            .arg("--ready-file")
            .arg(&ready_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawning {cmd:?}: {e}"))?;
        let stderr = child.stderr.take().ok_or("stderr was not piped")?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&log);
        let echo = echo.map(str::to_owned);
        // Reads to the end, so the child never blocks on a full pipe.
        let reader = thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(prefix) = &echo {
                    eprintln!("{prefix}{line}");
                }
                lock(&sink).push(line);
            }
        });
        Ok(Served {
            child: Some(child),
            addr: None,
            ready_file,
            log,
            stderr: Some(reader),
        })
    }

    /// Spawns `cmd` and waits until it is ready.
    pub fn start(cmd: Command, echo: Option<&str>) -> Result<Served, String> {
        let mut served = Served::spawn(cmd, echo)?;
        served.wait_ready(GUARD)?;
        Ok(served)
    }

    /// The address, if the ready file is there now; an error if the child exited first or
    /// wrote a file that does not parse.
    pub fn poll_ready(&mut self) -> Result<Option<SocketAddr>, String> {
        if let Some(addr) = self.addr {
            return Ok(Some(addr));
        }
        match Ready::read(&self.ready_file) {
            Some(Ok(ready)) => {
                self.addr = Some(ready.listen);
                return Ok(Some(ready.listen));
            }
            Some(Err(e)) => return Err(self.failure(&e)),
            None => {}
        }
        let exited = match self.child.as_mut() {
            Some(child) => child.try_wait().map_err(|e| e.to_string())?,
            None => return Err(self.failure("the child was already stopped")),
        };
        match exited {
            Some(status) => Err(self.failure(&format!("exited with {status} before it was ready"))),
            None => Ok(None),
        }
    }

    /// Waits (polling every 10 ms) until the ready file names the address; an error naming
    /// the child's stderr if it exits first or `guard` passes.
    pub fn wait_ready(&mut self, guard: Duration) -> Result<SocketAddr, String> {
        let started = Instant::now();
        loop {
            if let Some(addr) = self.poll_ready()? {
                return Ok(addr);
            }
            if started.elapsed() > guard {
                let _ = self.kill();
                return Err(self.failure(&format!("not ready within {guard:?}")));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Where the child says it is ready.
    pub fn ready_file(&self) -> &Path {
        &self.ready_file
    }

    /// The address; panics before the child is ready (a harness bug, not a server fault).
    pub fn addr(&self) -> SocketAddr {
        self.addr.expect("the child is not ready yet")
    }

    fn failure(&self, what: &str) -> String {
        format!("{what}; its stderr:\n{}", self.log_text())
    }

    /// Everything the child wrote to stderr so far.
    pub fn log_text(&self) -> String {
        lock(&self.log).join("\n")
    }

    /// The child's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL and reap; `None` if it was already stopped.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        let status = child.wait().ok();
        self.join_reader();
        status
    }

    /// SIGTERM (a graceful shutdown) and wait for the exit; after `guard` it is killed and this
    /// is an error naming its stderr.
    pub fn terminate(&mut self, guard: Duration) -> Result<ExitStatus, String> {
        let mut child = self.child.take().ok_or("the child was already stopped")?;
        let pid = child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .map_err(|e| format!("running kill: {e}"))?;
        if !sent.success() {
            return Err(format!("kill -TERM {pid}: {sent}"));
        }
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                break status;
            }
            if started.elapsed() > guard {
                let _ = child.kill();
                let _ = child.wait();
                self.join_reader();
                return Err(self.failure(&format!("no exit within {guard:?} of SIGTERM")));
            }
            thread::sleep(Duration::from_millis(10));
        };
        self.join_reader();
        Ok(status)
    }

    fn join_reader(&mut self) {
        if let Some(reader) = self.stderr.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.kill();
        let _ = std::fs::remove_file(&self.ready_file);
    }
}
