//! The WAL's identity: 16 random bytes created with the WAL and kept in it (`<dir>/identity`),
//! so `(wal id, lsn, index)` names one record even when many nodes write one store.

use std::fmt;
use std::io;
use std::path::Path;

use crate::error::{MarkError, OpenError};
use crate::io::WalIo;
use crate::marks;

const FILE: &str = "identity";

/// A WAL's identity.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WalId(pub [u8; 16]);

impl fmt::Display for WalId {
    /// Lower-case hex, 32 digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for WalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WalId({self})")
    }
}

/// Reads the identity of the WAL in `dir`, creating it (durably: file synced, renamed into
/// place, directory synced) when the WAL has none yet.
pub(crate) fn load_or_create(io: &dyn WalIo, dir: &Path) -> Result<WalId, OpenError> {
    let path = dir.join(FILE);
    let err = |op: &'static str, source: io::Error| OpenError::Io {
        op,
        path: path.clone(),
        source,
    };
    match io.read_file(&path) {
        Ok(bytes) => {
            let id: [u8; 16] = bytes.as_slice().try_into().map_err(|_| {
                err(
                    "reading identity",
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{} bytes, expected 16", bytes.len()),
                    ),
                )
            })?;
            return Ok(WalId(id));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(err("reading identity", e)),
    }
    let mut id = [0u8; 16];
    getrandom::fill(&mut id)
        .map_err(|e| err("drawing identity", io::Error::other(e.to_string())))?;
    // The marks' durable write: a stale temporary file (a crash's) is removed first.
    let tmp = marks::write_tmp(io, &path, &id).map_err(|e| match e {
        MarkError::Io { op, path, source } => OpenError::Io { op, path, source },
        other => err("writing identity", io::Error::other(other.to_string())),
    })?;
    io.rename(&tmp, &path)
        .map_err(|e| err("renaming identity", e))?;
    io.sync_dir(dir).map_err(|e| err("syncing identity", e))?;
    Ok(WalId(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::StdIo;

    #[test]
    fn identity_is_created_once_kept_and_distinct_per_wal() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let first = load_or_create(&StdIo, a.path()).unwrap();
        assert_eq!(load_or_create(&StdIo, a.path()).unwrap(), first, "kept");
        assert_ne!(load_or_create(&StdIo, b.path()).unwrap(), first, "random");
        std::fs::write(a.path().join(FILE), b"short").unwrap();
        assert!(
            load_or_create(&StdIo, a.path()).is_err(),
            "a damaged identity is refused, never replaced by a new one"
        );
    }
}
