//! Segment files: naming, the in-memory index of what each holds, and the recovery scan that
//! heals a torn tail on the newest segment and refuses corruption anywhere else.

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::error::{Corruption, OpenError};
use crate::format::{
    BadFrame, FrameReader, Next, SEGMENT_HEADER_LEN, decode_segment_header, find_valid_frame,
};
use crate::io::WalIo;
use crate::types::{Lsn, TenantId};

const SEGMENT_SUFFIX: &str = ".wal";

/// Appended to a segment's name when truncation retires it: recovery does not read a retired
/// file, it removes it.
const RETIRED_SUFFIX: &str = ".retired";

/// File name of the segment whose first frame is `base`.
pub(crate) fn segment_name(base: Lsn) -> String {
    format!("{:020}{SEGMENT_SUFFIX}", base.0)
}

/// The name a segment at `path` is retired under before it is removed.
pub(crate) fn retired_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(RETIRED_SUFFIX);
    PathBuf::from(name)
}

/// Parses a segment file name. `Ok(None)`: not a segment file; `Err`: a `.wal` file whose
/// name does not parse.
fn parse_segment_name(name: &str) -> Result<Option<Lsn>, ()> {
    let Some(stem) = name.strip_suffix(SEGMENT_SUFFIX) else {
        return Ok(None);
    };
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return Err(());
    }
    stem.parse().map(|n| Some(Lsn(n))).map_err(|_| ())
}

/// What one segment holds, for truncation and replay.
#[derive(Debug)]
pub(crate) struct SegmentMeta {
    pub(crate) base: Lsn,
    pub(crate) path: PathBuf,
    /// Bytes known good (and, for the active segment, synced).
    pub(crate) len: u64,
    /// Last frame's lsn; `Lsn::ZERO` while the segment has no frame.
    pub(crate) last: Lsn,
    /// Each tenant with frames here, and its highest lsn here.
    pub(crate) tenants: HashMap<TenantId, Lsn>,
}

impl SegmentMeta {
    pub(crate) fn new(base: Lsn, path: PathBuf) -> Self {
        Self {
            base,
            path,
            len: SEGMENT_HEADER_LEN as u64,
            last: Lsn::ZERO,
            tenants: HashMap::new(),
        }
    }

    pub(crate) fn has_frames(&self) -> bool {
        self.last != Lsn::ZERO
    }

    /// Records a frame of `tenant` at `lsn` (lsns arrive increasing).
    pub(crate) fn record(&mut self, lsn: Lsn, tenant: &TenantId) {
        self.last = lsn;
        match self.tenants.get_mut(tenant) {
            Some(max) => *max = lsn,
            None => {
                self.tenants.insert(tenant.clone(), lsn);
            }
        }
    }
}

/// What recovery did to a torn tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The (newest) segment it was found in.
    pub segment: PathBuf,
    /// Byte offset it was cut at (0: the header itself was torn and the file removed).
    pub offset: u64,
    /// Bytes removed.
    pub bytes: u64,
    /// What the first bad frame looked like (`None`: the segment header was torn).
    pub problem: Option<BadFrame>,
}

/// The segments found on open, oldest first, after healing.
#[derive(Debug)]
pub(crate) struct Scan {
    pub(crate) segments: Vec<SegmentMeta>,
    pub(crate) torn: Option<TornTail>,
    /// Highest lsn implied by what is on disk: the last frame, or one below the newest
    /// segment's base (a segment's name is its first lsn, even if it holds no frame).
    pub(crate) last: Lsn,
    pub(crate) frames: u64,
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> OpenError + 'a {
    move |source| OpenError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Lists, validates and heals the segments in `dir`.
pub(crate) fn scan(io: &dyn WalIo, dir: &Path) -> Result<Scan, OpenError> {
    let mut bases = Vec::new();
    let mut retired = false;
    for name in io.list_dir(dir).map_err(io_err("listing", dir))? {
        let segment = name.strip_suffix(RETIRED_SUFFIX).map(parse_segment_name);
        if matches!(segment, Some(Ok(Some(_)))) {
            // Truncation retired it and a crash came before it was removed.
            let path = dir.join(name);
            io.remove_file(&path)
                .map_err(io_err("removing retired", &path))?;
            retired = true;
            continue;
        }
        match parse_segment_name(&name) {
            Ok(Some(base)) => bases.push((base, dir.join(name))),
            Ok(None) => {}
            Err(()) => {
                return Err(OpenError::UnexpectedFile {
                    path: dir.join(name),
                });
            }
        }
    }
    if retired {
        io.sync_dir(dir).map_err(io_err("syncing", dir))?;
    }
    bases.sort_by_key(|(base, _)| *base);

    let mut out = Scan {
        segments: Vec::with_capacity(bases.len()),
        torn: None,
        last: Lsn::ZERO,
        frames: 0,
    };
    let count = bases.len();
    for (i, (base, path)) in bases.into_iter().enumerate() {
        let newest = i + 1 == count;
        if let Some(meta) = scan_one(io, dir, base, path, newest, &mut out)? {
            out.segments.push(meta);
        }
        out.last = out.last.max(Lsn(base.0.saturating_sub(1)));
    }
    Ok(out)
}

/// Scans one segment. `None` if it was the newest and its header was torn (file removed).
fn scan_one(
    io: &dyn WalIo,
    dir: &Path,
    base: Lsn,
    path: PathBuf,
    newest: bool,
    out: &mut Scan,
) -> Result<Option<SegmentMeta>, OpenError> {
    let corrupt = |offset, problem| OpenError::Corrupt {
        segment: path.clone(),
        offset,
        problem,
    };
    let (mut reader, len) = io.open_read(&path).map_err(io_err("opening", &path))?;
    let mut header = Vec::with_capacity(SEGMENT_HEADER_LEN);
    (&mut reader)
        .take(SEGMENT_HEADER_LEN as u64)
        .read_to_end(&mut header)
        .map_err(io_err("reading", &path))?;
    match decode_segment_header(&header) {
        Ok(found) if found != base => {
            return Err(corrupt(
                0,
                Corruption::BaseMismatch {
                    name: base,
                    header: found,
                },
            ));
        }
        Ok(_) => {}
        Err(_) if !newest => return Err(corrupt(0, Corruption::Header)),
        Err(_) => {
            // A crash between creating the newest segment and syncing its header. Torn only if
            // nothing valid follows.
            if let Some(at) = valid_frame_after(io, &path, 0, out.last)? {
                return Err(corrupt(0, Corruption::HeaderBeforeValid { valid_at: at }));
            }
            io.remove_file(&path)
                .map_err(io_err("removing torn", &path))?;
            io.sync_dir(dir).map_err(io_err("syncing", dir))?;
            out.torn = Some(TornTail {
                segment: path,
                offset: 0,
                bytes: len,
                problem: None,
            });
            return Ok(None);
        }
    }
    if base <= out.last {
        return Err(corrupt(
            0,
            Corruption::BaseNotIncreasing {
                base,
                previous: out.last,
            },
        ));
    }

    let mut meta = SegmentMeta::new(base, path.clone());
    let after = Lsn(base.0.saturating_sub(1));
    let mut frames = FrameReader::new(reader, SEGMENT_HEADER_LEN as u64, len, after);
    loop {
        match frames.next_frame().map_err(io_err("reading", &path))? {
            Next::Frame(frame) => {
                let tenant = TenantId::from_bytes(frame.tenant_bytes())
                    .expect("the frame reader only returns frames with valid tenants");
                meta.record(frame.lsn, &tenant);
                meta.len = frames.position();
                out.frames += 1;
            }
            Next::End => break,
            Next::Bad { offset, problem } => {
                let tearable = matches!(
                    problem,
                    BadFrame::Truncated | BadFrame::LengthTooSmall | BadFrame::ChecksumMismatch
                );
                if !newest || !tearable {
                    return Err(corrupt(offset, Corruption::Frame(problem)));
                }
                if let Some(at) = valid_frame_after(io, &path, offset, frames.last_lsn())? {
                    return Err(corrupt(
                        offset,
                        Corruption::FrameBeforeValid {
                            problem,
                            valid_at: at,
                        },
                    ));
                }
                io.truncate(&path, offset)
                    .map_err(io_err("truncating torn tail of", &path))?;
                out.torn = Some(TornTail {
                    segment: path.clone(),
                    offset,
                    bytes: len - offset,
                    problem: Some(problem),
                });
                meta.len = offset;
                break;
            }
        }
    }
    out.last = out.last.max(meta.last);
    Ok(Some(meta))
}

/// Offset of a valid frame (lsn above `after`) anywhere at or after `from` in `path`.
fn valid_frame_after(
    io: &dyn WalIo,
    path: &Path,
    from: u64,
    after: Lsn,
) -> Result<Option<u64>, OpenError> {
    let (reader, _) = io.open_read(path).map_err(io_err("opening", path))?;
    let mut rest = Vec::new();
    let mut reader = reader;
    io::copy(&mut (&mut reader).take(from), &mut io::sink()).map_err(io_err("reading", path))?;
    reader
        .read_to_end(&mut rest)
        .map_err(io_err("reading", path))?;
    Ok(find_valid_frame(&rest, after).map(|p| from + p as u64))
}
