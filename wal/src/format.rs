//! Byte layouts: segment header, frame, marks file, snapshot file. All integers little-endian,
//! all checksums CRC32C.
//!
//! Segment file `segments/<base lsn, 20 digits>.wal`:
//!
//! ```text
//! header (24 bytes): magic "OURIOWAL" | version u32 | base lsn u64 | crc32c(previous 20 bytes) u32
//! frame*:            len u32 | crc u32 | lsn u64 | tenant_len u8 | tenant | payload
//! ```
//!
//! A frame's `len` counts the bytes after its `crc` field (`8 + 1 + tenant_len + payload_len`).
//! Its `crc` is `crc32c_append(crc32c(len ++ tenant_len ++ tenant ++ payload), lsn)`: the lsn is
//! folded in last so the checksum of everything else is computed before the append takes the
//! commit lock, and only the lsn's eight bytes are hashed under it.

use std::io::{self, Read};

use crate::types::{Lsn, MAX_TENANT_LEN, TenantId};

/// Bytes of a segment header.
pub const SEGMENT_HEADER_LEN: usize = 24;
/// Bytes of a frame before its tenant and payload (`len`, `crc`, `lsn`, `tenant_len`).
pub const FRAME_HEADER_LEN: usize = 17;

const SEGMENT_MAGIC: [u8; 8] = *b"OURIOWAL";
const MARKS_MAGIC: [u8; 8] = *b"OURIOMRK";
const SNAPSHOT_MAGIC: [u8; 8] = *b"OURIOSNP";
const FORMAT_VERSION: u32 = 1;
/// `len` of the smallest frame: lsn, tenant length, a one-byte tenant, no payload.
const MIN_FRAME_BODY: u32 = 8 + 1 + 1;

/// Bytes a frame of `tenant` and `payload_len` payload bytes occupies in a segment.
#[must_use]
pub fn frame_len(tenant: &TenantId, payload_len: usize) -> usize {
    FRAME_HEADER_LEN + tenant.as_str().len() + payload_len
}

/// Encodes a segment header for a segment whose first frame will carry `base`.
pub(crate) fn segment_header(base: Lsn) -> [u8; SEGMENT_HEADER_LEN] {
    let mut h = [0u8; SEGMENT_HEADER_LEN];
    h[..8].copy_from_slice(&SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&base.0.to_le_bytes());
    let crc = crc32c::crc32c(&h[..20]);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Why a segment header is unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderProblem {
    /// Fewer than [`SEGMENT_HEADER_LEN`] bytes.
    Short,
    /// Wrong magic, version or checksum.
    Invalid,
}

/// Decodes a segment header, returning its base lsn.
pub(crate) fn decode_segment_header(bytes: &[u8]) -> Result<Lsn, HeaderProblem> {
    let Some(h) = bytes.get(..SEGMENT_HEADER_LEN) else {
        return Err(HeaderProblem::Short);
    };
    let crc = u32::from_le_bytes(h[20..24].try_into().expect("4 bytes"));
    if h[..8] != SEGMENT_MAGIC
        || u32::from_le_bytes(h[8..12].try_into().expect("4 bytes")) != FORMAT_VERSION
        || crc32c::crc32c(&h[..20]) != crc
    {
        return Err(HeaderProblem::Invalid);
    }
    Ok(Lsn(u64::from_le_bytes(
        h[12..20].try_into().expect("8 bytes"),
    )))
}

/// The lsn-independent part of a frame, computed before the commit lock is taken.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FramePrefix {
    len: u32,
    partial_crc: u32,
}

impl FramePrefix {
    /// Checksums everything but the lsn. `None` if the frame would not fit a `u32` length.
    pub(crate) fn new(tenant: &TenantId, payload: &[u8]) -> Option<Self> {
        let tenant = tenant.as_str().as_bytes();
        let len = u32::try_from(8 + 1 + tenant.len() + payload.len()).ok()?;
        let mut crc = crc32c::crc32c(&len.to_le_bytes());
        // A validated tenant is at most 64 bytes, so its length fits the u8 field.
        crc = crc32c::crc32c_append(crc, &[tenant.len() as u8]);
        crc = crc32c::crc32c_append(crc, tenant);
        crc = crc32c::crc32c_append(crc, payload);
        Some(Self {
            len,
            partial_crc: crc,
        })
    }

    /// Total encoded bytes of the frame.
    pub(crate) fn encoded_len(self) -> usize {
        8 + self.len as usize
    }

    /// Appends the whole frame with `lsn` to `out` (the only work done under the commit lock).
    pub(crate) fn encode_into(
        self,
        out: &mut Vec<u8>,
        lsn: Lsn,
        tenant: &TenantId,
        payload: &[u8],
    ) {
        let lsn_bytes = lsn.0.to_le_bytes();
        let crc = crc32c::crc32c_append(self.partial_crc, &lsn_bytes);
        let tenant = tenant.as_str().as_bytes();
        out.reserve(self.encoded_len());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&lsn_bytes);
        out.push(tenant.len() as u8);
        out.extend_from_slice(tenant);
        out.extend_from_slice(payload);
    }
}

/// Why the bytes at an offset are not a valid frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadFrame {
    /// The frame header or body runs past the end of the segment.
    Truncated,
    /// `len` is smaller than the smallest possible frame (zeros read as `len = 0` land here).
    LengthTooSmall,
    /// The checksum does not match the bytes.
    ChecksumMismatch,
    /// The checksum matches but the tenant bytes are not a valid tenant id.
    InvalidTenant,
    /// The checksum matches but the lsn does not increase on the previous frame (or is below
    /// the segment's base lsn).
    LsnNotIncreasing,
}

impl std::fmt::Display for BadFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BadFrame::Truncated => "frame runs past the end of the segment",
            BadFrame::LengthTooSmall => "frame length field is too small (zeroed or garbage)",
            BadFrame::ChecksumMismatch => "frame checksum mismatch",
            BadFrame::InvalidTenant => "frame carries an invalid tenant id",
            BadFrame::LsnNotIncreasing => "frame lsn does not increase",
        })
    }
}

/// A decoded frame: its lsn and the bytes after its checksum, kept as one buffer
/// so the payload is handed out without another copy.
#[derive(Debug)]
pub(crate) struct RawFrame {
    pub(crate) lsn: Lsn,
    /// Bytes after the `crc` field: lsn, tenant length, tenant, payload.
    pub(crate) body: Vec<u8>,
}

impl RawFrame {
    pub(crate) fn tenant_bytes(&self) -> &[u8] {
        &self.body[9..self.payload_start()]
    }

    pub(crate) fn payload_start(&self) -> usize {
        9 + self.body[8] as usize
    }
}

/// Checks a frame whose `len`, `crc` and following `len` bytes are all in hand.
fn check_frame(len: u32, crc: u32, rest: &[u8], after: Lsn) -> Result<Lsn, BadFrame> {
    let lsn_bytes: [u8; 8] = rest[..8].try_into().expect("len >= MIN_FRAME_BODY");
    let body = &rest[8..];
    let mut c = crc32c::crc32c(&len.to_le_bytes());
    c = crc32c::crc32c_append(c, body);
    c = crc32c::crc32c_append(c, &lsn_bytes);
    if c != crc {
        return Err(BadFrame::ChecksumMismatch);
    }
    let tenant_len = body[0] as usize;
    if tenant_len == 0 || tenant_len > MAX_TENANT_LEN || 1 + tenant_len > body.len() {
        return Err(BadFrame::InvalidTenant);
    }
    if TenantId::from_bytes(&body[1..1 + tenant_len]).is_err() {
        return Err(BadFrame::InvalidTenant);
    }
    let lsn = Lsn(u64::from_le_bytes(lsn_bytes));
    if lsn <= after {
        return Err(BadFrame::LsnNotIncreasing);
    }
    Ok(lsn)
}

/// Whether `bytes` (the rest of a segment) holds, at any offset, a frame that decodes and whose
/// lsn is above `after`. Used to tell a torn tail (nothing valid follows) from corruption.
pub(crate) fn find_valid_frame(bytes: &[u8], after: Lsn) -> Option<usize> {
    (0..bytes.len()).find(|&p| {
        let Some(h) = bytes.get(p..p + 8) else {
            return false;
        };
        let len = u32::from_le_bytes(h[..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes"));
        if len < MIN_FRAME_BODY {
            return false;
        }
        match bytes.get(p + 8..p + 8 + len as usize) {
            Some(rest) => check_frame(len, crc, rest, after).is_ok(),
            None => false,
        }
    })
}

/// What the next read from a segment produced.
#[derive(Debug)]
pub(crate) enum Next {
    /// A valid frame.
    Frame(RawFrame),
    /// The segment ended exactly after the previous frame.
    End,
    /// The bytes at `offset` are not a valid frame.
    Bad { offset: u64, problem: BadFrame },
}

/// Streams frames out of one segment (after its header), checking each.
#[derive(Debug)]
pub(crate) struct FrameReader<R> {
    inner: R,
    pos: u64,
    end: u64,
    last: Lsn,
}

impl<R: Read> FrameReader<R> {
    /// `inner` is positioned at byte `pos` of a segment of `end` bytes; every frame must carry
    /// an lsn above `after`.
    pub(crate) fn new(inner: R, pos: u64, end: u64, after: Lsn) -> Self {
        Self {
            inner,
            pos,
            end,
            last: after,
        }
    }

    /// Byte offset of the next frame.
    pub(crate) fn position(&self) -> u64 {
        self.pos
    }

    /// The lsn of the last frame returned (or the initial bound).
    pub(crate) fn last_lsn(&self) -> Lsn {
        self.last
    }

    /// Reads the next frame. After `Bad` or an error the reader must not be used again.
    pub(crate) fn next_frame(&mut self) -> io::Result<Next> {
        let offset = self.pos;
        let remaining = self.end - self.pos;
        if remaining == 0 {
            return Ok(Next::End);
        }
        if remaining < 8 {
            return Ok(Next::Bad {
                offset,
                problem: BadFrame::Truncated,
            });
        }
        let mut head = [0u8; 8];
        self.inner.read_exact(&mut head)?;
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
        if len < MIN_FRAME_BODY {
            return Ok(Next::Bad {
                offset,
                problem: BadFrame::LengthTooSmall,
            });
        }
        if u64::from(len) > remaining - 8 {
            return Ok(Next::Bad {
                offset,
                problem: BadFrame::Truncated,
            });
        }
        let mut rest = vec![0u8; len as usize];
        self.inner.read_exact(&mut rest)?;
        match check_frame(len, crc, &rest, self.last) {
            Ok(lsn) => {
                self.pos += 8 + u64::from(len);
                self.last = lsn;
                Ok(Next::Frame(RawFrame { lsn, body: rest }))
            }
            Err(problem) => Ok(Next::Bad { offset, problem }),
        }
    }
}

/// Encodes a tenant's marks file (its frontier `X_t`).
pub(crate) fn encode_marks(tenant: &TenantId, frontier: Lsn) -> Vec<u8> {
    let t = tenant.as_str().as_bytes();
    let mut out = Vec::with_capacity(8 + 4 + 8 + 1 + t.len() + 4);
    out.extend_from_slice(&MARKS_MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&frontier.0.to_le_bytes());
    out.push(t.len() as u8);
    out.extend_from_slice(t);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a marks file, checking it belongs to `tenant`. `None` if it is damaged.
pub(crate) fn decode_marks(bytes: &[u8], tenant: &TenantId) -> Option<Lsn> {
    let (body, crc) = split_crc(bytes)?;
    if body.len() < 21 || body[..8] != MARKS_MAGIC {
        return None;
    }
    if u32::from_le_bytes(body[8..12].try_into().ok()?) != FORMAT_VERSION {
        return None;
    }
    let frontier = Lsn(u64::from_le_bytes(body[12..20].try_into().ok()?));
    let t = body.get(21..21 + body[20] as usize)?;
    (21 + t.len() == body.len() && t == tenant.as_str().as_bytes() && crc32c::crc32c(body) == crc)
        .then_some(frontier)
}

/// Encodes a tenant's snapshot file: the miner state after frames `<= lsn` (`S_t = lsn`).
pub(crate) fn encode_snapshot(tenant: &TenantId, lsn: Lsn, state: &[u8]) -> Vec<u8> {
    let t = tenant.as_str().as_bytes();
    let mut out = Vec::with_capacity(8 + 4 + 8 + 1 + t.len() + 8 + state.len() + 4);
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&lsn.0.to_le_bytes());
    out.push(t.len() as u8);
    out.extend_from_slice(t);
    out.extend_from_slice(&(state.len() as u64).to_le_bytes());
    out.extend_from_slice(state);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a snapshot file into its lsn and the range of its state bytes. `None` if damaged or
/// not `tenant`'s.
pub(crate) fn decode_snapshot(
    bytes: &[u8],
    tenant: &TenantId,
) -> Option<(Lsn, std::ops::Range<usize>)> {
    let (body, crc) = split_crc(bytes)?;
    if body.len() < 21 || body[..8] != SNAPSHOT_MAGIC || crc32c::crc32c(body) != crc {
        return None;
    }
    if u32::from_le_bytes(body[8..12].try_into().ok()?) != FORMAT_VERSION {
        return None;
    }
    let lsn = Lsn(u64::from_le_bytes(body[12..20].try_into().ok()?));
    let tenant_end = 21 + body[20] as usize;
    if body.get(21..tenant_end)? != tenant.as_str().as_bytes() {
        return None;
    }
    let len = u64::from_le_bytes(body.get(tenant_end..tenant_end + 8)?.try_into().ok()?);
    let start = tenant_end + 8;
    (u64::try_from(body.len() - start).ok()? == len).then_some((lsn, start..body.len()))
}

fn split_crc(bytes: &[u8]) -> Option<(&[u8], u32)> {
    let split = bytes.len().checked_sub(4)?;
    let (body, crc) = bytes.split_at(split);
    Some((body, u32::from_le_bytes(crc.try_into().ok()?)))
}
