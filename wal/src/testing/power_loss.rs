//! A simulated file system that loses power: [`PowerLossIo`] keeps what was synced apart from
//! what was only written, and [`PowerLossIo::crash`] returns the image a machine would find
//! after losing power at that instant.
//!
//! The model, per the POSIX durability contract the WAL relies on:
//! - a file's bytes are durable up to its last `sync_data` (or `truncate`, which syncs); past
//!   that, a crash keeps a random prefix of what was written, possibly nothing;
//! - a directory's entries (a create, a rename, a removal) are durable once the directory is
//!   synced; before that, a crash keeps a random prefix of the directory's pending changes, in
//!   order (a rename is one change: the old name or the new one, never both or neither);
//! - from [`PowerLossIo::fail_after`] calls on, every operation fails, as when the device is
//!   gone: the caller sees errors and acknowledges nothing more.
//!
//! Directories themselves are implicit (created on demand); the WAL creates its directories
//! once and syncs them, and the local object store syncs each new directory's chain up to its
//! root, which is outside what this model checks (`local_put_syncs_the_directory_chain_once`
//! counts those syncs).

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Cursor, Read};
use std::path::{Path, PathBuf};

use crate::io::{SegmentFile, WalIo};
use crate::sync::{Arc, Mutex, lock};

/// A seeded pseudo-random source for crash images (fastrand's generator).
#[derive(Debug, Clone)]
pub struct CrashRng(fastrand::Rng);

impl CrashRng {
    /// A source from `seed`.
    pub fn new(seed: u64) -> CrashRng {
        CrashRng(fastrand::Rng::with_seed(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.u64(..)
    }

    /// A number in `0..=n`.
    pub fn upto(&mut self, n: usize) -> usize {
        self.0.usize(0..=n)
    }
}

type Inode = u64;

#[derive(Debug, Clone, Default)]
struct File {
    data: Vec<u8>,
    synced: usize,
}

/// One pending change of a directory entry: `path` now names `inode` (or nothing).
#[derive(Debug, Clone)]
struct Change {
    path: PathBuf,
    inode: Option<Inode>,
    /// The old name a rename removed, in the same change.
    removed: Option<PathBuf>,
}

#[derive(Debug, Default)]
struct Fs {
    files: BTreeMap<Inode, File>,
    /// Entries as the running system sees them.
    live: BTreeMap<PathBuf, Inode>,
    /// Entries as they are on disk.
    durable: BTreeMap<PathBuf, Inode>,
    /// Per directory, the changes not yet synced, in order.
    pending: BTreeMap<PathBuf, Vec<Change>>,
    next_inode: Inode,
    calls: u64,
    fail_after: Option<u64>,
}

impl Fs {
    fn call(&mut self) -> io::Result<()> {
        self.calls += 1;
        match self.fail_after {
            Some(n) if self.calls > n => Err(io::Error::other("power lost")),
            _ => Ok(()),
        }
    }

    fn change(&mut self, change: Change) {
        let dir = change
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        if let Some(old) = &change.removed {
            self.live.remove(old);
        }
        match change.inode {
            Some(i) => self.live.insert(change.path.clone(), i),
            None => self.live.remove(&change.path),
        };
        self.pending.entry(dir).or_default().push(change);
    }

    fn inode(&self, path: &Path) -> io::Result<Inode> {
        self.live
            .get(path)
            .copied()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
}

fn apply(entries: &mut BTreeMap<PathBuf, Inode>, change: &Change) {
    if let Some(old) = &change.removed {
        entries.remove(old);
    }
    match change.inode {
        Some(i) => entries.insert(change.path.clone(), i),
        None => entries.remove(&change.path),
    };
}

/// The simulated file system (cheap to clone: clones share it).
#[derive(Clone, Default)]
pub struct PowerLossIo {
    fs: Arc<Mutex<Fs>>,
}

impl fmt::Debug for PowerLossIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fs = lock(&self.fs);
        f.debug_struct("PowerLossIo")
            .field("files", &fs.live.len())
            .field("calls", &fs.calls)
            .finish_non_exhaustive()
    }
}

impl PowerLossIo {
    /// An empty file system.
    pub fn new() -> PowerLossIo {
        PowerLossIo::default()
    }

    /// Operations performed so far.
    pub fn calls(&self) -> u64 {
        lock(&self.fs).calls
    }

    /// Operations succeed again: the process that saw them fail died, the machine did not,
    /// and what it wrote stays as it was (synced or not) for the next process.
    pub fn restore(&self) {
        lock(&self.fs).fail_after = None;
    }

    /// Every operation after the next `n` fails (the power is gone from then on).
    pub fn fail_after(&self, n: u64) {
        let mut fs = lock(&self.fs);
        fs.fail_after = Some(fs.calls + n);
    }

    /// Gives `from`'s file the name `to` as well (a hard link: one pending change in `to`'s
    /// directory), failing with `AlreadyExists` if `to` exists. Not part of [`WalIo`]: the local
    /// object store links a staged file to its object's name, the WAL never does.
    ///
    /// # Errors
    /// `NotFound` for a missing `from`, `AlreadyExists`, or the power being gone.
    pub fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut fs = lock(&self.fs);
        fs.call()?;
        let inode = fs.inode(from)?;
        if fs.live.contains_key(to) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        fs.change(Change {
            path: to.to_owned(),
            inode: Some(inode),
            removed: None,
        });
        Ok(())
    }

    /// Every file under `dir` (at any depth) as the running system sees it, with its bytes.
    pub fn files_under(&self, dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let fs = lock(&self.fs);
        fs.live
            .iter()
            .filter(|(p, _)| p.starts_with(dir))
            .map(|(p, i)| (p.clone(), fs.files[i].data.clone()))
            .collect()
    }

    /// The image found after losing power now: durable bytes and entries, plus a random part
    /// of what was not synced (each file keeps a random prefix of its unsynced bytes, each
    /// directory a random prefix of its unsynced changes).
    pub fn crash(&self, rng: &mut CrashRng) -> PowerLossIo {
        let fs = lock(&self.fs);
        let mut entries = fs.durable.clone();
        for changes in fs.pending.values() {
            for change in &changes[..rng.upto(changes.len())] {
                apply(&mut entries, change);
            }
        }
        let mut files = BTreeMap::new();
        for inode in entries.values() {
            if files.contains_key(inode) {
                continue;
            }
            let f = &fs.files[inode];
            let keep = f.synced + rng.upto(f.data.len() - f.synced);
            let data = f.data[..keep].to_vec();
            files.insert(
                *inode,
                File {
                    synced: data.len(),
                    data,
                },
            );
        }
        PowerLossIo {
            fs: Arc::new(Mutex::new(Fs {
                files,
                live: entries.clone(),
                durable: entries,
                pending: BTreeMap::new(),
                next_inode: fs.next_inode,
                calls: 0,
                fail_after: None,
            })),
        }
    }
}

#[derive(Debug)]
struct SimFile {
    fs: PowerLossIo,
    inode: Inode,
}

impl SegmentFile for SimFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut fs = lock(&self.fs.fs);
        fs.call()?;
        if let Some(f) = fs.files.get_mut(&self.inode) {
            f.data.extend_from_slice(buf);
        }
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        let mut fs = lock(&self.fs.fs);
        fs.call()?;
        if let Some(f) = fs.files.get_mut(&self.inode) {
            f.synced = f.data.len();
        }
        Ok(())
    }
}

impl WalIo for PowerLossIo {
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        lock(&self.fs).call()
    }

    fn lock_dir(&self, _dir: &Path) -> io::Result<Box<dyn fmt::Debug + Send + Sync>> {
        lock(&self.fs).call()?;
        Ok(Box::new("power-loss lock"))
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut fs = lock(&self.fs);
        fs.call()?;
        Ok(fs
            .live
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect())
    }

    fn open_read(&self, path: &Path) -> io::Result<(Box<dyn Read + Send>, u64)> {
        let mut fs = lock(&self.fs);
        fs.call()?;
        let data = fs.files[&fs.inode(path)?].data.clone();
        let len = data.len() as u64;
        Ok((Box::new(Cursor::new(data)), len))
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        let mut fs = lock(&self.fs);
        fs.call()?;
        if fs.live.contains_key(path) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        let inode = fs.next_inode;
        fs.next_inode += 1;
        fs.files.insert(inode, File::default());
        fs.change(Change {
            path: path.to_owned(),
            inode: Some(inode),
            removed: None,
        });
        Ok(Box::new(SimFile {
            fs: self.clone(),
            inode,
        }))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        let mut fs = lock(&self.fs);
        fs.call()?;
        let inode = fs.inode(path)?;
        Ok(Box::new(SimFile {
            fs: self.clone(),
            inode,
        }))
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut fs = lock(&self.fs);
        fs.call()?;
        let inode = fs.inode(path)?;
        if let Some(f) = fs.files.get_mut(&inode) {
            f.data.truncate(usize::try_from(len).unwrap_or(usize::MAX));
            // `truncate` makes the new length durable (StdIo syncs after set_len).
            f.synced = f.data.len();
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut fs = lock(&self.fs);
        fs.call()?;
        let inode = fs.inode(from)?;
        if from.parent() != to.parent() {
            return Err(io::Error::other(
                "the power-loss model renames within one directory only",
            ));
        }
        fs.change(Change {
            path: to.to_owned(),
            inode: Some(inode),
            removed: Some(from.to_owned()),
        });
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut fs = lock(&self.fs);
        fs.call()?;
        fs.inode(path)?;
        fs.change(Change {
            path: path.to_owned(),
            inode: None,
            removed: None,
        });
        Ok(())
    }

    fn remove_gradually(&self, path: &Path, _step: u64) -> io::Result<()> {
        let mut fs = lock(&self.fs);
        fs.call()?;
        let inode = fs.inode(path)?;
        // The cuts change the file's length, which may reach the disk at any moment: modelled
        // as all of them reaching it at once, before the name's removal does.
        if let Some(f) = fs.files.get_mut(&inode) {
            f.data.clear();
            f.synced = 0;
        }
        fs.change(Change {
            path: path.to_owned(),
            inode: None,
            removed: None,
        });
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut fs = lock(&self.fs);
        fs.call()?;
        let changes = fs.pending.remove(dir).unwrap_or_default();
        for change in &changes {
            apply(&mut fs.durable, change);
        }
        Ok(())
    }
}
