//! The two values every other module speaks in: [`Lsn`] and [`TenantId`].

use std::borrow::Borrow;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// A log sequence number: the global, strictly increasing position of a frame in the WAL.
///
/// The first frame ever appended is `Lsn(1)`; [`Lsn::ZERO`] means "before every frame", which is
/// the frontier and snapshot mark of a tenant that has never been stamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The position before every frame.
    pub const ZERO: Lsn = Lsn(0);

    /// The raw number.
    #[must_use]
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Longest tenant id, in bytes.
pub const MAX_TENANT_LEN: usize = 64;

/// A validated tenant id: 1 to 64 bytes of `[A-Za-z0-9_.-]`.
///
/// The character set keeps a tenant usable as a file name (its marks and snapshot files) and
/// as a metric label without escaping. Cloning is cheap (shared string).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TenantId(Arc<str>);

/// Why a string is not a tenant id. The message quotes the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantIdError {
    /// The id has no bytes.
    #[error("invalid tenant id \"\": a tenant id needs 1 to 64 bytes of [A-Za-z0-9_.-]")]
    Empty,
    /// The id is longer than [`MAX_TENANT_LEN`].
    #[error("invalid tenant id {value:?}: {len} bytes, at most 64 allowed")]
    TooLong {
        /// The offending value (lossily decoded if it was not UTF-8).
        value: String,
        /// Its length in bytes.
        len: usize,
    },
    /// The id holds a byte outside `[A-Za-z0-9_.-]`.
    #[error(
        "invalid tenant id {value:?}: byte 0x{byte:02x} at index {index} is not in [A-Za-z0-9_.-]"
    )]
    BadByte {
        /// The offending value (lossily decoded if it was not UTF-8).
        value: String,
        /// The first byte outside the allowed set.
        byte: u8,
        /// Its index.
        index: usize,
    },
}

impl TenantId {
    /// Validates `value` as a tenant id.
    ///
    /// # Errors
    /// [`TenantIdError`] naming the value when it is empty, longer than 64 bytes or holds a byte
    /// outside `[A-Za-z0-9_.-]`.
    pub fn new(value: &str) -> Result<Self, TenantIdError> {
        Self::from_bytes(value.as_bytes())
    }

    /// Validates raw bytes (e.g. an HTTP header value) as a tenant id.
    ///
    /// # Errors
    /// As [`TenantId::new`].
    pub fn from_bytes(value: &[u8]) -> Result<Self, TenantIdError> {
        validate(value)?;
        // Every allowed byte is ASCII, so the lossy decode is exact (and borrows).
        Ok(Self(Arc::from(&*String::from_utf8_lossy(value))))
    }

    /// The id as a string.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn validate(value: &[u8]) -> Result<(), TenantIdError> {
    if value.is_empty() {
        return Err(TenantIdError::Empty);
    }
    if value.len() > MAX_TENANT_LEN {
        return Err(TenantIdError::TooLong {
            value: String::from_utf8_lossy(value).into_owned(),
            len: value.len(),
        });
    }
    if let Some(index) = value.iter().position(|&b| !is_tenant_byte(b)) {
        return Err(TenantIdError::BadByte {
            value: String::from_utf8_lossy(value).into_owned(),
            byte: value[index],
            index,
        });
    }
    Ok(())
}

fn is_tenant_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

impl fmt::Debug for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TenantId({:?})", &*self.0)
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for TenantId {
    type Err = TenantIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<&str> for TenantId {
    type Error = TenantIdError;

    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl AsRef<str> for TenantId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for TenantId {
    fn borrow(&self) -> &str {
        &self.0
    }
}
