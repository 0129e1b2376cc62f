//! Fault injection for tests of the WAL and of code built on it: [`FaultyIo`] wraps any
//! [`WalIo`] and fails, or pauses, the n-th call at a chosen [`FaultPoint`].
//!
//! Not for production use; it costs nothing unless a caller opens a WAL with it.
//! [`power_loss`] simulates losing power: what was not synced may be gone.

pub mod power_loss;

use std::fmt;
use std::io::{self, Read};
use std::path::Path;

use crate::io::{SegmentFile, StdIo, WalIo};
use crate::sync::{Arc, Condvar, Mutex, StdArc, lock, wait};

/// An operation [`FaultyIo`] can fail or pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultPoint {
    /// [`WalIo::create_new`] (segment, or temporary marks/snapshot file).
    Create,
    /// [`SegmentFile::write_all`].
    Write,
    /// [`SegmentFile::sync_data`].
    Sync,
    /// [`WalIo::sync_dir`].
    DirSync,
    /// [`WalIo::rename`].
    Rename,
    /// [`WalIo::remove_file`] and [`WalIo::remove_gradually`].
    Remove,
}

const POINTS: usize = 6;

impl FaultPoint {
    fn index(self) -> usize {
        match self {
            FaultPoint::Create => 0,
            FaultPoint::Write => 1,
            FaultPoint::Sync => 2,
            FaultPoint::DirSync => 3,
            FaultPoint::Rename => 4,
            FaultPoint::Remove => 5,
        }
    }
}

/// How a planned failure fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Return an error without doing the operation.
    Error,
    /// For [`FaultPoint::Write`]: write the first `keep` bytes (clamped), then return an error.
    /// Other points treat it as [`Failure::Error`].
    PartialWrite {
        /// Bytes written before the error.
        keep: usize,
    },
    /// Panic inside the call (to exercise unwind paths).
    Panic,
}

#[derive(Debug)]
struct Plan {
    point: FaultPoint,
    call: u64,
    failure: Failure,
}

#[derive(Debug)]
struct PauseSlot {
    id: u64,
    point: FaultPoint,
    call: u64,
    reached: bool,
    released: bool,
}

#[derive(Debug, Default)]
struct State {
    calls: [u64; POINTS],
    plans: Vec<Plan>,
    pauses: Vec<PauseSlot>,
    next_pause: u64,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

/// A [`WalIo`] that delegates to another and injects planned failures and pauses.
/// Clones share their plan and call counters.
#[derive(Clone)]
pub struct FaultyIo {
    inner: StdArc<dyn WalIo>,
    shared: Arc<Shared>,
}

impl fmt::Debug for FaultyIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyIo")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// A planned pause: the chosen call blocks until [`Pause::release`].
#[derive(Debug)]
pub struct Pause {
    shared: Arc<Shared>,
    id: u64,
}

impl Pause {
    /// Blocks until the paused call has been entered (and is now blocked).
    pub fn wait_reached(&self) {
        let mut state = lock(&self.shared.state);
        while !state.pauses.iter().any(|p| p.id == self.id && p.reached) {
            state = wait(&self.shared.changed, state);
        }
    }

    /// Lets the paused call proceed (it then succeeds or fails as planned).
    pub fn release(self) {
        let mut state = lock(&self.shared.state);
        if let Some(p) = state.pauses.iter_mut().find(|p| p.id == self.id) {
            p.released = true;
        }
        self.shared.changed.notify_all();
    }
}

impl FaultyIo {
    /// Wraps `inner`.
    pub fn new(inner: StdArc<dyn WalIo>) -> Self {
        Self {
            inner,
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
            }),
        }
    }

    /// Wraps the production [`StdIo`].
    pub fn std() -> Self {
        Self::new(StdArc::new(StdIo))
    }

    /// Calls made so far at `point`.
    pub fn calls(&self, point: FaultPoint) -> u64 {
        lock(&self.shared.state).calls[point.index()]
    }

    /// Fails the `nth` call at `point` from now (`1` = the next one).
    pub fn fail(&self, point: FaultPoint, nth: u64, failure: Failure) {
        let mut state = lock(&self.shared.state);
        let call = state.calls[point.index()] + nth;
        state.plans.push(Plan {
            point,
            call,
            failure,
        });
    }

    /// Pauses the `nth` call at `point` from now (`1` = the next one) before it does anything.
    pub fn pause(&self, point: FaultPoint, nth: u64) -> Pause {
        let mut state = lock(&self.shared.state);
        let call = state.calls[point.index()] + nth;
        let id = state.next_pause;
        state.next_pause += 1;
        state.pauses.push(PauseSlot {
            id,
            point,
            call,
            reached: false,
            released: false,
        });
        Pause {
            shared: Arc::clone(&self.shared),
            id,
        }
    }

    /// Counts a call at `point`, honours any pause on it, and returns its planned failure.
    fn enter(shared: &Shared, point: FaultPoint) -> Option<Failure> {
        let mut state = lock(&shared.state);
        state.calls[point.index()] += 1;
        let call = state.calls[point.index()];
        if let Some(slot) = state
            .pauses
            .iter_mut()
            .find(|p| p.point == point && p.call == call)
        {
            slot.reached = true;
            let id = slot.id;
            shared.changed.notify_all();
            while !state.pauses.iter().any(|p| p.id == id && p.released) {
                state = wait(&shared.changed, state);
            }
        }
        state
            .plans
            .iter()
            .find(|p| p.point == point && p.call == call)
            .map(|p| p.failure)
    }

    fn check(&self, point: FaultPoint, what: &Path) -> io::Result<()> {
        match Self::enter(&self.shared, point) {
            None => Ok(()),
            Some(Failure::Panic) => panic!("injected {point:?} panic on {}", what.display()),
            Some(_) => Err(injected(point, what)),
        }
    }
}

fn injected(point: FaultPoint, what: &Path) -> io::Error {
    io::Error::other(format!("injected {point:?} failure on {}", what.display()))
}

struct FaultyFile {
    inner: Box<dyn SegmentFile>,
    shared: Arc<Shared>,
    path: std::path::PathBuf,
}

impl fmt::Debug for FaultyFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyFile")
            .field("path", &self.path)
            .finish()
    }
}

impl SegmentFile for FaultyFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match FaultyIo::enter(&self.shared, FaultPoint::Write) {
            None => self.inner.write_all(buf),
            Some(Failure::PartialWrite { keep }) => {
                self.inner.write_all(&buf[..keep.min(buf.len())])?;
                Err(injected(FaultPoint::Write, &self.path))
            }
            Some(Failure::Error) => Err(injected(FaultPoint::Write, &self.path)),
            Some(Failure::Panic) => panic!("injected write panic on {}", self.path.display()),
        }
    }

    fn sync_data(&mut self) -> io::Result<()> {
        match FaultyIo::enter(&self.shared, FaultPoint::Sync) {
            None => self.inner.sync_data(),
            Some(Failure::Panic) => panic!("injected sync panic on {}", self.path.display()),
            Some(_) => Err(injected(FaultPoint::Sync, &self.path)),
        }
    }
}

impl FaultyIo {
    fn wrap(&self, inner: Box<dyn SegmentFile>, path: &Path) -> Box<dyn SegmentFile> {
        Box::new(FaultyFile {
            inner,
            shared: Arc::clone(&self.shared),
            path: path.to_path_buf(),
        })
    }
}

impl WalIo for FaultyIo {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }

    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn fmt::Debug + Send + Sync>> {
        self.inner.lock_dir(dir)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }

    fn open_read(&self, path: &Path) -> io::Result<(Box<dyn Read + Send>, u64)> {
        self.inner.open_read(path)
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        self.check(FaultPoint::Create, path)?;
        let file = self.inner.create_new(path)?;
        Ok(self.wrap(file, path))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        let file = self.inner.open_append(path)?;
        Ok(self.wrap(file, path))
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.inner.truncate(path, len)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.check(FaultPoint::Rename, to)?;
        self.inner.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.check(FaultPoint::Remove, path)?;
        self.inner.remove_file(path)
    }

    fn remove_gradually(&self, path: &Path, step: u64) -> io::Result<()> {
        self.check(FaultPoint::Remove, path)?;
        self.inner.remove_gradually(path, step)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.check(FaultPoint::DirSync, dir)?;
        self.inner.sync_dir(dir)
    }
}
