//! Snapshot encoding: a small binary header, a CRC32C, and the state as JSON.
//!
//! ```text
//! magic "OURIOSMN" (8) | format version u32 LE | crc32c u32 LE | payload length u64 LE | payload
//! ```
//! The checksum covers the version, the length and the payload. The payload is the tenant's
//! state (tenant, configuration, event sequence, templates, prefix tree) as JSON, with every map
//! ordered, so equal states give equal bytes.

use thiserror::Error;

use crate::config::MinerConfig;
use crate::drain::State;

/// The snapshot format this build writes and reads. 2: templates stored slot by slot, and
/// mined by the tokenizer that keeps quoted strings whole (a snapshot of 1 was mined by one that
/// split at every space, so its state is not what this build mines: the tenant's frames are
/// replayed instead).
pub const SNAPSHOT_FORMAT_VERSION: u32 = 2;

const MAGIC: &[u8; 8] = b"OURIOSMN";
const HEADER_LEN: usize = 24;

/// Why a snapshot cannot be restored. Every variant means the same to the caller: the snapshot
/// is a cache that cannot be used, so replay the tenant's frames from the start.
#[derive(Debug, Error)]
pub enum SnapshotError {
    /// Fewer bytes than the header.
    #[error(
        "miner snapshot for tenant {tenant:?} is truncated: {len} bytes, the header alone is {HEADER_LEN}"
    )]
    Truncated {
        /// The tenant being restored.
        tenant: String,
        /// Bytes given.
        len: usize,
    },
    /// Not a miner snapshot.
    #[error("miner snapshot for tenant {tenant:?} has a bad magic number")]
    BadMagic {
        /// The tenant being restored.
        tenant: String,
    },
    /// Written by a build with another snapshot format.
    #[error(
        "miner snapshot for tenant {tenant:?} has format version {found}, this build reads {SNAPSHOT_FORMAT_VERSION}"
    )]
    UnsupportedVersion {
        /// The tenant being restored.
        tenant: String,
        /// The version in the header.
        found: u32,
    },
    /// The payload is shorter or longer than the header says.
    #[error(
        "miner snapshot for tenant {tenant:?} declares {declared} payload bytes but holds {found}"
    )]
    LengthMismatch {
        /// The tenant being restored.
        tenant: String,
        /// Payload length in the header.
        declared: u64,
        /// Payload bytes present.
        found: usize,
    },
    /// The bytes were damaged.
    #[error(
        "miner snapshot for tenant {tenant:?} fails its checksum: stored {stored:#010x}, computed {computed:#010x}"
    )]
    ChecksumMismatch {
        /// The tenant being restored.
        tenant: String,
        /// CRC32C in the header.
        stored: u32,
        /// CRC32C of the bytes.
        computed: u32,
    },
    /// The checksum matched but the payload does not decode.
    #[error("miner snapshot for tenant {tenant:?} does not decode")]
    Decode {
        /// The tenant being restored.
        tenant: String,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The snapshot belongs to another tenant.
    #[error("miner snapshot for tenant {tenant:?} holds tenant {found:?}")]
    TenantMismatch {
        /// The tenant being restored.
        tenant: String,
        /// The tenant in the snapshot.
        found: String,
    },
    /// The snapshot was taken under another configuration, so its state is not the state this
    /// configuration would mine to.
    #[error(
        "miner snapshot for tenant {tenant:?} was taken under another miner configuration ({found:?})"
    )]
    ConfigMismatch {
        /// The tenant being restored.
        tenant: String,
        /// The configuration in the snapshot.
        found: MinerConfig,
    },
    /// The snapshot decodes but breaks an invariant of the miner's state.
    #[error("miner snapshot for tenant {tenant:?} is inconsistent: {reason}")]
    Inconsistent {
        /// The tenant being restored.
        tenant: String,
        /// The first broken invariant.
        reason: String,
    },
}

fn checksum(bytes: &[u8]) -> u32 {
    // Version and length, then the payload: the stored CRC field itself is skipped.
    crc32c::crc32c_append(crc32c::crc32c(&bytes[8..12]), &bytes[16..])
}

pub(crate) fn encode(state: &State) -> Vec<u8> {
    // Serializing plain data (strings, integers, finite validated floats, maps with string or
    // integer keys) into a `Vec` cannot fail.
    let payload = serde_json::to_vec(state).unwrap_or_default();
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&SNAPSHOT_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&payload);
    let crc = checksum(&out);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    out
}

pub(crate) fn decode(
    tenant: &str,
    config: &MinerConfig,
    bytes: &[u8],
) -> Result<State, SnapshotError> {
    let t = || tenant.to_owned();
    if bytes.len() < HEADER_LEN {
        return Err(SnapshotError::Truncated {
            tenant: t(),
            len: bytes.len(),
        });
    }
    if &bytes[..8] != MAGIC {
        return Err(SnapshotError::BadMagic { tenant: t() });
    }
    let word = |r: std::ops::Range<usize>| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&bytes[r]);
        u32::from_le_bytes(b)
    };
    let version = word(8..12);
    if version != SNAPSHOT_FORMAT_VERSION {
        return Err(SnapshotError::UnsupportedVersion {
            tenant: t(),
            found: version,
        });
    }
    let stored = word(12..16);
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[16..24]);
    let declared = u64::from_le_bytes(len);
    let payload = &bytes[HEADER_LEN..];
    if declared != payload.len() as u64 {
        return Err(SnapshotError::LengthMismatch {
            tenant: t(),
            declared,
            found: payload.len(),
        });
    }
    let computed = checksum(bytes);
    if stored != computed {
        return Err(SnapshotError::ChecksumMismatch {
            tenant: t(),
            stored,
            computed,
        });
    }
    let state: State = serde_json::from_slice(payload).map_err(|source| SnapshotError::Decode {
        tenant: t(),
        source,
    })?;
    if state.tenant != tenant {
        return Err(SnapshotError::TenantMismatch {
            tenant: t(),
            found: state.tenant,
        });
    }
    if &state.config != config {
        return Err(SnapshotError::ConfigMismatch {
            tenant: t(),
            found: state.config,
        });
    }
    state
        .check()
        .map_err(|reason| SnapshotError::Inconsistent {
            tenant: t(),
            reason,
        })?;
    Ok(state)
}
