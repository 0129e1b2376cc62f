//! The `file://` store: object_store's local file system, made durable before a put returns.
//!
//! A cut stamps a frontier and truncates the WAL once a put returned Ok, so a local put must
//! survive an OS crash or power loss from that moment. object_store's `with_fsync(true)` syncs
//! the staged file, links it, and syncs the destination directory and every directory the put
//! itself created. Three gaps remain, and [`DurableLocalStore`] closes them:
//!
//! - a directory another put created concurrently: this put finds it present and does not sync
//!   its entry in its parent, while the other put may not have finished doing so. So the first
//!   time this process puts below a directory, it syncs the whole chain from the object's
//!   directory up to the store root, and remembers it (after the syncs succeeded).
//! - the store root itself, created at start: its entry in its parent is synced once at start.
//! - staging files (`<object>#<n>`) a crash left behind: removed at start, in the background
//!   (only those a minute older than the start, so this process's own puts are never raced).
//! - an object a create-only put finds already linked (RFC 0058: an earlier attempt at the same
//!   sealed unit, perhaps by a process that died before syncing): the file and its directory
//!   chain are synced before `AlreadyExists` is returned, so the caller may settle on it.
//!
//! Directory syncs go through [`DirSync`], so a test can see every one of them.

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::path::{Path as FsPath, PathBuf};

use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, PutOptions, PutPayload, PutResult, Result};

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
        std::fs::File::open(dir)?.sync_all()
    }
}

/// A local directory as an object store whose puts are durable when they return.
#[derive(Debug)]
pub struct DurableLocalStore {
    inner: LocalFileSystem,
    root: PathBuf,
    syncer: Arc<dyn DirSync>,
    /// Directories whose chain up to the root this process has synced.
    synced: Mutex<HashSet<PathBuf>>,
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
        // The root's own entry, and every ancestor's, may be as new as this start.
        let mut dir = Some(root.as_path());
        while let Some(d) = dir {
            syncer.sync_dir(d)?;
            dir = d.parent();
        }
        let inner = LocalFileSystem::new_with_prefix(&root)
            .map_err(io::Error::other)?
            .with_fsync(true);
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
        Ok(DurableLocalStore {
            inner,
            root,
            syncer,
            synced: Mutex::new(HashSet::new()),
        })
    }

    /// The store's root directory.
    pub fn root(&self) -> &FsPath {
        &self.root
    }

    /// Syncs every directory from `location`'s parent up to the root that this process has not
    /// synced yet (deepest first), then remembers them.
    fn sync_chain(&self, location: &Path) -> Result<()> {
        let file = self.inner.path_to_filesystem(location)?;
        let mut pending = Vec::new();
        {
            let synced = lock(&self.synced);
            let mut dir = file.parent();
            while let Some(d) = dir {
                if !d.starts_with(&self.root) || synced.contains(d) {
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
            self.syncer
                .sync_dir(d)
                .map_err(|source| object_store::Error::Generic {
                    store: "DurableLocalStore",
                    source: Box::new(source),
                })?;
        }
        lock(&self.synced).extend(pending);
        Ok(())
    }

    async fn durable_put(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        match self.inner.put_opts(location, payload, opts).await {
            Ok(result) => {
                self.sync_chain(location)?;
                Ok(result)
            }
            // A create-only put found the object (RFC 0058): an earlier attempt linked it, maybe
            // in a process that died before syncing its directory. Make it durable before the
            // caller settles anything on it.
            Err(e @ object_store::Error::AlreadyExists { .. }) => {
                let file = self.inner.path_to_filesystem(location)?;
                std::fs::File::open(&file)
                    .and_then(|f| f.sync_all())
                    .map_err(|source| object_store::Error::Generic {
                        store: "DurableLocalStore",
                        source: Box::new(source),
                    })?;
                self.sync_chain(location)?;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }
}

/// Is `name` a staging file object_store's local store writes before linking an object
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
    // Multipart uploads are not used by the sinks; they get object_store's own durability
    // (file and destination directory synced on completion).
    crate::store::object_store_with_put!(durable_put);
}

impl fmt::Display for DurableLocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DurableLocalStore({})", self.root.display())
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
