//! The `file://` store: a local directory as an object store, made durable before a put returns.
//!
//! A cut stamps a frontier and truncates the WAL once a put returned Ok, so a local put must
//! survive an OS crash or power loss from that moment. [`DurableLocalStore`] writes each object
//! itself, through [`LocalFs`] (so the power-loss model runs the very code that ships):
//!
//! 1. the bytes go to a staging file `<object>#<n>` in the object's directory, which is synced;
//! 2. the staging file is linked to the object's name (create-only puts: the link fails if the
//!    name exists) or renamed over it (overwriting puts), and the staging name removed;
//! 3. the object's directory is synced, and, the first time this process puts below a
//!    directory, every directory up to the store root (another put may have created one of
//!    them concurrently and not finished syncing its entry);
//! 4. a create-only put that finds the name taken (RFC 0058: an earlier attempt at the same
//!    sealed unit, perhaps by a process that died before syncing its directory) syncs the
//!    directory chain before it answers `AlreadyExists`, so the caller may settle on it (the
//!    file's bytes were synced before that attempt linked it).
//!
//! At start the root and its ancestors are synced (its entry may be as new as the start), and
//! staging files a crash left behind are removed in the background. Reads, lists and deletes go
//! to object_store's local store over the same directory.

use std::collections::HashSet;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, PutResult, Result};

use crate::sync::{Arc, Mutex, lock};

/// Staging files younger than this at start are left alone (see `DurableLocalStore::new`).
const STAGING_MARGIN: std::time::Duration = std::time::Duration::from_secs(60);

/// Makes a directory's entries durable.
pub trait DirSync: Send + Sync + fmt::Debug {
    /// `fsync` on `dir`.
    ///
    /// # Errors
    /// The underlying error.
    fn sync_dir(&self, dir: &FsPath) -> io::Result<()>;
}

/// Production [`DirSync`]: open the directory and `fsync` it.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsyncDir;

impl DirSync for FsyncDir {
    fn sync_dir(&self, dir: &FsPath) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// The file operations a [`DurableLocalStore`] put performs, in the order it performs them.
/// [`StdFs`] is the production implementation; a test can put a simulated file system behind
/// it that loses what was not synced.
pub trait LocalFs: Send + Sync + fmt::Debug {
    /// Creates `dir` and its parents.
    ///
    /// # Errors
    /// The underlying error.
    fn create_dir_all(&self, dir: &FsPath) -> io::Result<()>;

    /// Creates `path` holding `bytes`, failing with `AlreadyExists` if it exists. Not synced.
    ///
    /// # Errors
    /// The underlying error.
    fn write_new(&self, path: &FsPath, bytes: &[u8]) -> io::Result<()>;

    /// Makes `path`'s bytes durable (`fsync` on the file).
    ///
    /// # Errors
    /// The underlying error.
    fn sync_file(&self, path: &FsPath) -> io::Result<()>;

    /// Gives `from`'s file the name `to` as well, failing with `AlreadyExists` if `to` exists.
    ///
    /// # Errors
    /// The underlying error.
    fn link_new(&self, from: &FsPath, to: &FsPath) -> io::Result<()>;

    /// Renames `from` to `to`, replacing `to`.
    ///
    /// # Errors
    /// The underlying error.
    fn rename(&self, from: &FsPath, to: &FsPath) -> io::Result<()>;

    /// Removes the name `path`.
    ///
    /// # Errors
    /// The underlying error.
    fn remove_file(&self, path: &FsPath) -> io::Result<()>;

    /// Makes `dir`'s entries durable (`fsync` on the directory).
    ///
    /// # Errors
    /// The underlying error.
    fn sync_dir(&self, dir: &FsPath) -> io::Result<()>;
}

/// Production [`LocalFs`] over `std::fs`; directory syncs through a [`DirSync`].
#[derive(Debug, Clone)]
pub struct StdFs {
    dirs: Arc<dyn DirSync>,
}

impl StdFs {
    /// `std::fs`, syncing directories with `dirs`.
    pub fn new(dirs: Arc<dyn DirSync>) -> StdFs {
        StdFs { dirs }
    }
}

impl Default for StdFs {
    fn default() -> StdFs {
        StdFs::new(Arc::new(FsyncDir))
    }
}

impl LocalFs for StdFs {
    fn create_dir_all(&self, dir: &FsPath) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn write_new(&self, path: &FsPath, bytes: &[u8]) -> io::Result<()> {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)?
            .write_all(bytes)
    }

    fn sync_file(&self, path: &FsPath) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn link_new(&self, from: &FsPath, to: &FsPath) -> io::Result<()> {
        std::fs::hard_link(from, to)
    }

    fn rename(&self, from: &FsPath, to: &FsPath) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &FsPath) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &FsPath) -> io::Result<()> {
        self.dirs.sync_dir(dir)
    }
}

/// A local directory as an object store whose puts are durable when they return.
#[derive(Debug)]
pub struct DurableLocalStore {
    inner: LocalFileSystem,
    puts: Arc<Puts>,
}

/// What a put needs, shared with the blocking task that performs it.
#[derive(Debug)]
struct Puts {
    root: PathBuf,
    fs: Arc<dyn LocalFs>,
    /// Directories whose chain up to the root this process has synced.
    synced: Mutex<HashSet<PathBuf>>,
}

fn store_err(source: io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "DurableLocalStore",
        source: Box::new(source),
    }
}

impl DurableLocalStore {
    /// A store rooted at `root` (created if missing), syncing directories with `fsync`.
    ///
    /// # Errors
    /// The root cannot be created, resolved or synced.
    pub fn new(root: &FsPath) -> io::Result<DurableLocalStore> {
        DurableLocalStore::with_syncer(root, Arc::new(FsyncDir))
    }

    /// As [`DurableLocalStore::new`], with another directory syncer (tests count the syncs).
    ///
    /// # Errors
    /// The root cannot be created, resolved or synced.
    pub fn with_syncer(root: &FsPath, syncer: Arc<dyn DirSync>) -> io::Result<DurableLocalStore> {
        std::fs::create_dir_all(root)?;
        let root = std::fs::canonicalize(root)?;
        let store = DurableLocalStore::with_fs(&root, Arc::new(StdFs::new(syncer)))?;
        let cleanup_root = root.clone();
        // Leftover staging files only waste space: remove them without delaying the start.
        // Only files well older than this store: this process's own puts stage files from now
        // on, removing one would fail its put, and file times are coarser than the clock (a
        // file staged just after this line can carry an earlier time). A crash's leftovers
        // younger than the margin go at a later start.
        let older_than = std::time::SystemTime::now() - STAGING_MARGIN;
        let _ = std::thread::Builder::new()
            .name("ourios-store-cleanup".into())
            .spawn(move || remove_staging_files(&cleanup_root, older_than));
        Ok(store)
    }

    /// A store whose puts go through `fs`, rooted at `root` (an existing absolute directory,
    /// which reads go to). No staging cleanup: that is [`DurableLocalStore::new`]'s.
    ///
    /// # Errors
    /// The root cannot be created or synced through `fs`, or is not a usable directory.
    pub fn with_fs(root: &FsPath, fs: Arc<dyn LocalFs>) -> io::Result<DurableLocalStore> {
        fs.create_dir_all(root)?;
        // The root's own entry, and every ancestor's, may be as new as this start.
        let mut dir = Some(root);
        while let Some(d) = dir {
            fs.sync_dir(d)?;
            dir = d.parent();
        }
        let inner = LocalFileSystem::new_with_prefix(root).map_err(io::Error::other)?;
        Ok(DurableLocalStore {
            inner,
            puts: Arc::new(Puts {
                root: root.to_path_buf(),
                fs,
                synced: Mutex::new(HashSet::new()),
            }),
        })
    }

    /// The store's root directory.
    pub fn root(&self) -> &FsPath {
        &self.puts.root
    }

    /// The file an object is kept in.
    ///
    /// # Errors
    /// The location does not map to a file under the root.
    pub fn path_of(&self, location: &Path) -> Result<PathBuf> {
        self.inner.path_to_filesystem(location)
    }

    async fn durable_put(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let target = self.inner.path_to_filesystem(location)?;
        let create = match opts.mode {
            PutMode::Overwrite => false,
            PutMode::Create => true,
            PutMode::Update(_) => {
                return Err(object_store::Error::NotImplemented {
                    operation: "conditional update".into(),
                    implementer: "DurableLocalStore".into(),
                });
            }
        };
        let puts = Arc::clone(&self.puts);
        let bytes = bytes::Bytes::from(payload);
        let key = location.to_string();
        let put = move || puts.put(&target, &bytes, create, &key);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime
                .spawn_blocking(put)
                .await
                .map_err(|e| store_err(io::Error::other(e)))?,
            Err(_) => put(),
        }
    }
}

impl Puts {
    /// The put, steps 1-4 of the module docs.
    fn put(&self, target: &FsPath, bytes: &[u8], create: bool, key: &str) -> Result<PutResult> {
        static STAGED: AtomicU64 = AtomicU64::new(0);
        let fs = &*self.fs;
        let dir = target
            .parent()
            .ok_or_else(|| store_err(io::Error::other("an object needs a directory")))?;
        fs.create_dir_all(dir).map_err(store_err)?;
        // A staging name no other put (of this process or another on the same store) holds.
        let staging = loop {
            // Relaxed: only the uniqueness of the value matters.
            let n = STAGED.fetch_add(1, Ordering::Relaxed);
            let mut name = target.as_os_str().to_owned();
            name.push(format!("#{n}"));
            let staging = PathBuf::from(name);
            match fs.write_new(&staging, bytes) {
                Ok(()) => break staging,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(store_err(e)),
            }
        };
        let published = fs.sync_file(&staging).and_then(|()| {
            if create {
                fs.link_new(&staging, target)
                    .and_then(|()| fs.remove_file(&staging))
            } else {
                fs.rename(&staging, target)
            }
        });
        match published {
            Ok(()) => {
                self.sync_chain(target).map_err(store_err)?;
                Ok(PutResult {
                    e_tag: None,
                    version: None,
                })
            }
            Err(e) if create && e.kind() == io::ErrorKind::AlreadyExists => {
                // The found object's bytes were synced before it was linked (step 1 of
                // whichever put linked it); its entry may not be.
                let _ = fs.remove_file(&staging);
                self.sync_chain(target).map_err(store_err)?;
                Err(object_store::Error::AlreadyExists {
                    path: key.to_owned(),
                    source: Box::new(e),
                })
            }
            Err(e) => {
                let _ = fs.remove_file(&staging);
                Err(store_err(e))
            }
        }
    }

    /// Syncs `file`'s directory (it holds the new entry), then every directory above it up to
    /// the root that this process has not synced yet, deepest first, and remembers them.
    fn sync_chain(&self, file: &FsPath) -> io::Result<()> {
        let mut pending = Vec::new();
        {
            let synced = lock(&self.synced);
            let mut dir = file.parent();
            while let Some(d) = dir {
                if !d.starts_with(&self.root) || (!pending.is_empty() && synced.contains(d)) {
                    break;
                }
                pending.push(d.to_path_buf());
                if d == self.root {
                    break;
                }
                dir = d.parent();
            }
        }
        for d in &pending {
            self.fs.sync_dir(d)?;
        }
        lock(&self.synced).extend(pending);
        Ok(())
    }
}

/// Is `name` a staging file a put writes before linking or renaming it to its object
/// (`<object>.parquet#<n>`)? Object names never contain `#`.
fn is_staging_file(name: &str) -> bool {
    name.rsplit_once('#').is_some_and(|(object, n)| {
        object.ends_with(".parquet") && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    })
}

/// Removes every staging file below `root` last modified before `older_than`; returns how
/// many. Errors are ignored: a file that cannot be removed now is tried again at the next start.
pub fn remove_staging_files(root: &FsPath, older_than: std::time::SystemTime) -> usize {
    let mut removed = 0;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => dirs.push(path),
                Ok(t) if t.is_file() => {
                    let staging = path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(is_staging_file)
                        && entry
                            .metadata()
                            .and_then(|m| m.modified())
                            .is_ok_and(|t| t < older_than);
                    if staging && std::fs::remove_file(&path).is_ok() {
                        removed += 1;
                    }
                }
                _ => {}
            }
        }
    }
    removed
}

// Puts go through this store's own method; everything else to `inner` (see the macro).
impl ObjectStore for DurableLocalStore {
    // Multipart uploads are not used by the sinks; they get object_store's own handling,
    // without its fsync option.
    crate::store::object_store_with_put!(durable_put);
}

impl fmt::Display for DurableLocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DurableLocalStore({})", self.puts.root.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_names_are_told_apart_from_objects() {
        assert!(is_staging_file(
            "00000000000000000001-abc-00000000.parquet#1"
        ));
        assert!(is_staging_file("x.parquet#12"));
        assert!(!is_staging_file(
            "00000000000000000001-abc-00000000.parquet"
        ));
        assert!(!is_staging_file("x.parquet#"));
        assert!(!is_staging_file("x.parquet#1a"));
        assert!(!is_staging_file("notes#1"));
    }
}
