//! The I/O seam: every file operation the WAL performs goes through [`WalIo`], so a test can
//! fail a write, a sync, a rename or a directory sync at an exact point (see
//! [`crate::testing::FaultyIo`]). [`StdIo`] is the production implementation over `std::fs`
//! with real `fdatasync` (`File::sync_data`) and directory `fsync`.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::path::Path;

/// A segment (or temporary marks/snapshot) file open for appending.
pub trait SegmentFile: Send + fmt::Debug {
    /// Appends all of `buf`. A failure may leave any prefix of `buf` written.
    ///
    /// # Errors
    /// The underlying write error.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;

    /// Makes everything written so far durable (`fdatasync`).
    ///
    /// # Errors
    /// The underlying sync error; the WAL treats it as fatal for the writer.
    fn sync_data(&mut self) -> io::Result<()>;
}

/// The file-system operations the WAL uses. Paths are always inside the WAL directory.
pub trait WalIo: Send + Sync + fmt::Debug {
    /// Creates `dir` and its parents.
    ///
    /// # Errors
    /// The underlying error.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// Takes an exclusive lock on `dir` for the lifetime of the returned guard.
    ///
    /// # Errors
    /// [`io::ErrorKind::WouldBlock`] if another holder has it, or the underlying error.
    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn fmt::Debug + Send + Sync>>;

    /// Names of the entries of `dir` (entries whose names are not UTF-8 are skipped).
    ///
    /// # Errors
    /// The underlying error.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;

    /// Opens `path` for sequential reading; returns the reader and the file's length.
    ///
    /// # Errors
    /// The underlying error.
    fn open_read(&self, path: &Path) -> io::Result<(Box<dyn Read + Send>, u64)>;

    /// Creates `path`, failing if it exists, open for appending.
    ///
    /// # Errors
    /// The underlying error.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>>;

    /// Opens an existing `path` for appending at its end.
    ///
    /// # Errors
    /// The underlying error.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>>;

    /// Cuts `path` to `len` bytes and makes the new length durable.
    ///
    /// # Errors
    /// The underlying error.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;

    /// Renames `from` to `to`, replacing `to` (atomic on POSIX file systems).
    ///
    /// # Errors
    /// The underlying error.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Removes the file `path`.
    ///
    /// # Errors
    /// The underlying error.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Removes `path`, a file nothing reads any more, first cutting it from its end `step`
    /// bytes at a time. Removing a large file at once frees all its blocks in one journal
    /// transaction, and an `fdatasync` of another file waits for it: on ext4 a 64 MiB segment
    /// removed at once held a concurrent sync for 12-20 ms, in 1 MiB steps for 1-2 ms. A crash
    /// midway may leave the file shorter under its name, so call it only on a name recovery
    /// does not read. By default a plain [`WalIo::remove_file`].
    ///
    /// # Errors
    /// The underlying error.
    fn remove_gradually(&self, path: &Path, step: u64) -> io::Result<()> {
        let _ = step;
        self.remove_file(path)
    }

    /// Makes `dir`'s entries (creations, renames, removals) durable (`fsync` on the directory).
    ///
    /// # Errors
    /// The underlying error.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Reads all of `path`.
    ///
    /// # Errors
    /// The underlying error.
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        let (mut reader, len) = self.open_read(path)?;
        let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        reader.read_to_end(&mut out)?;
        Ok(out)
    }
}

/// Production I/O over `std::fs`.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdIo;

/// Attempts, and the pause between them, before a held directory lock is reported.
const LOCK_ATTEMPTS: u32 = 50;
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(10);

/// Read buffer for segment scans and replay: large enough that a 4 KiB frame costs no syscall.
const READ_BUFFER: usize = 256 * 1024;

#[derive(Debug)]
struct StdSegmentFile(File);

impl SegmentFile for StdSegmentFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
}

impl WalIo for StdIo {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn fmt::Debug + Send + Sync>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join("LOCK"))?;
        // The lock belongs to the open file description, which a child process forked by any
        // thread of this process shares until it execs; a WAL closed and reopened across such
        // a window would see its own released lock as held. Wait that window out, briefly.
        for _ in 0..LOCK_ATTEMPTS {
            match file.try_lock() {
                Ok(()) => return Ok(Box::new(file)),
                Err(fs::TryLockError::WouldBlock) => std::thread::sleep(LOCK_RETRY),
                Err(fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            "the wal directory is locked by another open wal",
        ))
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn open_read(&self, path: &Path) -> io::Result<(Box<dyn Read + Send>, u64)> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok((Box::new(BufReader::with_capacity(READ_BUFFER, file)), len))
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(path)?;
        Ok(Box::new(StdSegmentFile(file)))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(Box::new(StdSegmentFile(file)))
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(len)?;
        file.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn remove_gradually(&self, path: &Path, step: u64) -> io::Result<()> {
        let step = step.max(1);
        let file = OpenOptions::new().write(true).open(path)?;
        let mut len = file.metadata()?.len();
        while len > step {
            len -= step;
            file.set_len(len)?;
        }
        drop(file);
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}
