//! Replay: every frame on disk, in lsn order, with the mode DESIGN §7 gives it.

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::path::PathBuf;

use crate::error::{Corruption, ReplayError};
use crate::format::{FrameReader, Next, SEGMENT_HEADER_LEN, decode_segment_header};
use crate::marks::{Marks, ReplayMode};
use crate::types::{Lsn, TenantId};
use crate::wal::Wal;

/// One frame as replay hands it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayFrame {
    /// The frame's lsn.
    pub lsn: Lsn,
    /// Its tenant.
    pub tenant: TenantId,
    /// What recovery should do with it, from the tenant's marks when the replay began.
    pub mode: ReplayMode,
    body: Vec<u8>,
    payload_start: usize,
}

impl ReplayFrame {
    /// The payload bytes.
    pub fn payload(&self) -> &[u8] {
        &self.body[self.payload_start..]
    }

    /// The payload, owned.
    pub fn into_payload(mut self) -> Vec<u8> {
        self.body.drain(..self.payload_start);
        self.body
    }
}

/// Iterator over every frame in the WAL as it stood when [`Wal::replay`] was called (frames
/// appended later are not included). Yields at most one error, then ends. While it lives,
/// [`Wal::truncate`] deletes nothing.
pub struct Replay<'a> {
    wal: &'a Wal,
    segments: VecDeque<(PathBuf, Lsn, u64)>,
    marks: HashMap<TenantId, Marks>,
    current: Option<(PathBuf, FrameReader<Box<dyn Read + Send>>)>,
    last: Lsn,
    interned: HashMap<Box<[u8]>, TenantId>,
    done: bool,
}

impl std::fmt::Debug for Replay<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("remaining_segments", &self.segments.len())
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl Wal {
    /// Replays every frame on disk in lsn order, each with its [`ReplayMode`] computed from
    /// the tenant's marks at this call: `Skipped` (`lsn <= S_t`), `RegenerationOnly`
    /// (`S_t < lsn <= X_t`), `Normal` (above both). Run it during recovery, before appends.
    pub fn replay(&self) -> Replay<'_> {
        let marks = self.marks_snapshot();
        let segments = self.begin_replay().into();
        Replay {
            wal: self,
            segments,
            marks,
            current: None,
            last: Lsn::ZERO,
            interned: HashMap::new(),
            done: false,
        }
    }
}

impl Replay<'_> {
    fn open_next(&mut self) -> Result<bool, ReplayError> {
        let Some((path, base, len)) = self.segments.pop_front() else {
            return Ok(false);
        };
        let io_err = |source| ReplayError::Io {
            segment: path.clone(),
            source,
        };
        let (mut reader, _) = self.wal.io().open_read(&path).map_err(io_err)?;
        let mut header = [0u8; SEGMENT_HEADER_LEN];
        reader.read_exact(&mut header).map_err(io_err)?;
        match decode_segment_header(&header) {
            Ok(found) if found == base => {}
            _ => {
                return Err(ReplayError::Corrupt {
                    segment: path,
                    offset: 0,
                    problem: Corruption::Header,
                });
            }
        }
        let after = self.last.max(Lsn(base.0.saturating_sub(1)));
        let frames = FrameReader::new(reader, SEGMENT_HEADER_LEN as u64, len, after);
        self.current = Some((path, frames));
        Ok(true)
    }

    fn next_frame(&mut self) -> Result<Option<ReplayFrame>, ReplayError> {
        loop {
            let Some((path, frames)) = &mut self.current else {
                if self.open_next()? {
                    continue;
                }
                return Ok(None);
            };
            let next = frames.next_frame().map_err(|source| ReplayError::Io {
                segment: path.clone(),
                source,
            })?;
            match next {
                Next::Frame(frame) => {
                    self.last = frame.lsn;
                    let tenant = intern(&mut self.interned, frame.tenant_bytes());
                    let mode = self
                        .marks
                        .get(&tenant)
                        .copied()
                        .unwrap_or_default()
                        .mode(frame.lsn);
                    let payload_start = frame.payload_start();
                    return Ok(Some(ReplayFrame {
                        lsn: frame.lsn,
                        tenant,
                        mode,
                        body: frame.body,
                        payload_start,
                    }));
                }
                Next::End => self.current = None,
                Next::Bad { offset, problem } => {
                    return Err(ReplayError::Corrupt {
                        segment: path.clone(),
                        offset,
                        problem: Corruption::Frame(problem),
                    });
                }
            }
        }
    }
}

fn intern(interned: &mut HashMap<Box<[u8]>, TenantId>, bytes: &[u8]) -> TenantId {
    if let Some(t) = interned.get(bytes) {
        return t.clone();
    }
    let tenant = TenantId::from_bytes(bytes)
        .expect("the frame reader only returns frames with valid tenants");
    interned.insert(bytes.into(), tenant.clone());
    tenant
}

impl Iterator for Replay<'_> {
    type Item = Result<ReplayFrame, ReplayError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_frame() {
            Ok(Some(frame)) => Some(Ok(frame)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for Replay<'_> {}

impl Drop for Replay<'_> {
    fn drop(&mut self) {
        self.wal.end_replay();
    }
}
