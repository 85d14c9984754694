//! The request log's journal: each row is appended to a local file (one `write`, no `fsync`)
//! before its answer's last byte is handed to the client, then queued for the writer as
//! before. Rows are postcard records behind a length (JSON cost ten times the instructions
//! on the request's thread), after a header naming the format. A process killed with SIGKILL leaves its rows in the page cache, so the rows of
//! every answer it gave survive it; a machine that loses power may lose the last few.
//!
//! The files are segments: each process appends to one of its own, held under an exclusive
//! `flock`. The writer retires a segment once its rows are in the store (a new one takes its
//! place when it grows past [`SEGMENT_BYTES`]) and deletes it. A segment nobody holds (its
//! process died, or the store refused some of its rows) is an orphan: the writer of any
//! process sharing the directory adopts it, writes its rows again (the writes are upserts by
//! request id, so a row already in the store stays one row) and deletes it.

use std::cell::RefCell;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use super::LogRow;

/// A segment past this size is retired at the next tick (~3,000 rows).
const SEGMENT_BYTES: u64 = 2 << 20;

/// How often the writer looks for orphans (and at its first tick, and at the tick after it
/// let one go). A segment that may hold rows the store lacks is retired (let go as an orphan)
/// once it is as old. While the store refuses rows the interval doubles, up to
/// [`ADOPT_AT_MOST`], so an outage costs no rereading every tick.
const ADOPT_EVERY: Duration = Duration::from_secs(2);
const ADOPT_AT_MOST: Duration = Duration::from_secs(60);

/// Orphans adopted in one tick stop at this many bytes; the rest wait for the next tick.
const ADOPT_BYTES: u64 = 16 << 20;

/// What a segment's file name ends with (`.tmp` while it is being made; `.unknown` once a
/// writer found a format it cannot read, kept for the operator).
const EXT: &str = "rows";

/// A segment's first bytes: the record format. A new `LogRow` field means a new version.
const HEADER: &[u8; 8] = b"SYJRNL03";

#[derive(Debug, thiserror::Error)]
#[error("request log journal {path}: {source}")]
pub struct JournalError {
    path: PathBuf,
    source: std::io::Error,
}

struct Segment {
    file: File,
    path: PathBuf,
    born: Instant,
}

pub(super) struct Journal {
    dir: PathBuf,
    current: RwLock<Segment>,
    /// The current segment holds rows the store may not have (the queue was full, or a
    /// write failed): it is kept as an orphan when retired, instead of deleted.
    dirty: AtomicBool,
    /// [`BROKEN`]: rows are not written to the current segment; [`CLOSED`]: it is deleted,
    /// and the next row opens a fresh one.
    state: AtomicU8,
    made: AtomicU64,
    /// Tells this process's segments from another's of the same pid and millisecond
    /// (containers sharing a directory are all pid 1).
    tag: u32,
    adoption: Mutex<Adoption>,
    append_errors: AtomicU64,
}

/// An append failed: the segment may end in a torn record, so nothing more goes after it; the
/// writer retires it at its next tick.
const BROKEN: u8 = 1;
/// The journal is closed (a graceful stop wrote every row, and its segment is deleted).
const CLOSED: u8 = 2;

struct Adoption {
    /// When the writer last looked for orphans (`None`: at its next tick).
    at: Option<Instant>,
    every: Duration,
}

/// The journal's work around one write of the writer: the segment retired before the drain,
/// and the orphans adopted, whose rows the writer writes in a write of their own (a row the
/// store refuses then holds back only other recovered rows, never the live ones).
pub(super) struct Tick {
    retired: Option<(Segment, bool)>,
    adopted: Vec<Segment>,
    /// Some segment could not be read: kept, and the adoption backs off.
    unread: bool,
    /// Orphans were left for a later tick (the byte cap).
    more: bool,
    /// The current segment's length once the rows queued by then were all queued: a segment
    /// still this long at [`Journal::close`] got no row the writer has not drained since.
    length: u64,
}

thread_local! {
    /// The row's record, serialised on the request's thread without an allocation per row.
    static RECORD: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Journal {
    /// Opens the journal in `dir` (made if missing) with a fresh segment of this process's.
    pub fn open(dir: &Path) -> Result<Journal, JournalError> {
        let err = |source| JournalError {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(err)?;
        let made = AtomicU64::new(0);
        let tag = fastrand::u32(..);
        let first = new_segment(dir, tag, &made).map_err(err)?;
        Ok(Journal {
            dir: dir.to_path_buf(),
            current: RwLock::new(first),
            dirty: AtomicBool::new(false),
            state: AtomicU8::new(0),
            made,
            tag,
            adoption: Mutex::new(Adoption {
                at: None,
                every: ADOPT_EVERY,
            }),
            append_errors: AtomicU64::new(0),
        })
    }

    /// Appends `row`'s record, then hands the row to `queue` (false: the queue dropped it),
    /// both under the segment's read lock: a segment retired (write lock) holds no row that
    /// is not already queued or marked dirty.
    pub fn append(&self, row: LogRow, queue: impl FnOnce(LogRow) -> bool) {
        // A thread being torn down has no buffer left: its row gets a fresh one.
        let mut queue = Some(queue);
        let mut row = Some(row);
        let mut with = |buf: &mut Vec<u8>| {
            if let (Some(row), Some(queue)) = (row.take(), queue.take()) {
                self.append_with(row, queue, buf);
            }
        };
        if RECORD.try_with(|b| with(&mut b.borrow_mut())).is_err() {
            with(&mut Vec::new());
        }
    }

    fn append_with(&self, row: LogRow, queue: impl FnOnce(LogRow) -> bool, buf: &mut Vec<u8>) {
        let len = encode(&row, buf);
        let mut seg = self.current.read().unwrap_or_else(PoisonError::into_inner);
        if self.state.load(Ordering::Relaxed) & CLOSED != 0 {
            drop(seg);
            self.reopen();
            seg = self.current.read().unwrap_or_else(PoisonError::into_inner);
        }
        if let Some(n) = len
            && self.state.load(Ordering::Relaxed) == 0
            && let Err(e) = (&seg.file).write_all(&buf[..n])
        {
            self.state.fetch_or(BROKEN, Ordering::Relaxed);
            let n = self.append_errors.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(path = %seg.path.display(), error = %e, failed = n,
                    "request log journal append failed; rows are only queued until a new segment");
            }
        }
        if !queue(row) {
            self.dirty.store(true, Ordering::Relaxed);
        }
    }

    /// Before the writer drains the queue: retires the segment when it is due (a fresh one
    /// takes its place first, so every row of the old one is queued by now) and adopts
    /// orphans when it is time to look. The adopted orphans' rows come beside the tick, for a
    /// write of their own.
    pub fn begin(&self) -> (Tick, Vec<LogRow>) {
        let mut a = self.adoption();
        let retired = self.due(a.every).then(|| self.rotate()).flatten();
        // Under the write lock, every append begun is done: its row is queued, for the drain
        // that follows to take.
        let length = {
            let seg = self.current.write().unwrap_or_else(PoisonError::into_inner);
            seg.file.metadata().map_or(u64::MAX, |m| m.len())
        };
        let mut rows = Vec::new();
        let mut tick = Tick {
            retired,
            adopted: Vec::new(),
            unread: false,
            more: false,
            length,
        };
        if a.at.is_none_or(|t| t.elapsed() >= a.every) {
            a.at = Some(Instant::now());
            let (found, more) = adopt(&self.dir);
            tick.more = more;
            for seg in found {
                match read_rows(&seg, &mut rows) {
                    Reading::Rows => tick.adopted.push(seg),
                    Reading::Failed => tick.unread = true,
                    Reading::SetAside => {}
                }
            }
        }
        if !rows.is_empty() {
            tracing::info!(
                rows = rows.len(),
                segments = tick.adopted.len(),
                "request log rows recovered from the journal"
            );
        }
        (tick, rows)
    }

    /// After the writes: `live` says whether the store took every queued row, `recovered`
    /// whether it took every row of the adopted orphans. Settled segments are deleted; the
    /// others are let go as orphans, to be adopted and written again. On the writer's `last`
    /// tick, a segment the store has every row of is closed ([`Journal::close`]).
    pub fn end(&self, tick: Tick, live: bool, recovered: bool, last: bool) {
        if last && live {
            self.close(tick.length);
        }
        if !live {
            self.dirty.store(true, Ordering::Relaxed);
        }
        let mut a = self.adoption();
        if !tick.adopted.is_empty() || tick.unread {
            // A segment that cannot be read backs the look off, but settles no other.
            a.every = match recovered && !tick.unread {
                true => ADOPT_EVERY,
                false => (a.every * 2).min(ADOPT_AT_MOST),
            };
        }
        if recovered && tick.more {
            a.at = None;
        }
        if let Some((seg, dirty)) = tick.retired {
            settle(seg, live && !dirty);
            if live && dirty {
                // Let go with rows the queue dropped: adopted (and written) next tick.
                a.at = None;
            }
        }
        for seg in tick.adopted {
            settle(seg, recovered);
        }
    }

    fn adoption(&self) -> std::sync::MutexGuard<'_, Adoption> {
        self.adoption.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The writer's last word, after a write that left the store with every row it drained (a
    /// graceful stop, or every sender gone): the current segment goes, unless it may hold a row
    /// the store lacks (dirty, broken, or grown since `length` was read at the tick's start).
    /// A row recorded after that (a stream cut as the process stops) opens a fresh segment.
    fn close(&self, length: u64) {
        let seg = self.current.write().unwrap_or_else(PoisonError::into_inner);
        let grown = seg.file.metadata().map_or(true, |m| m.len() != length);
        if grown || self.dirty.load(Ordering::Relaxed) || self.state.load(Ordering::Relaxed) != 0 {
            return;
        }
        if std::fs::remove_file(&seg.path).is_ok() {
            self.state.fetch_or(CLOSED, Ordering::Relaxed);
        }
    }

    /// A row after [`Journal::close`] deleted the segment: a fresh one takes it, for the next
    /// start (or a replica) to write.
    #[cold]
    fn reopen(&self) {
        let mut cur = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if self.state.load(Ordering::Relaxed) & CLOSED == 0 {
            return;
        }
        match new_segment(&self.dir, self.tag, &self.made) {
            Ok(fresh) => {
                *cur = fresh;
                self.state.fetch_and(!CLOSED, Ordering::Relaxed);
            }
            Err(e) => tracing::warn!(dir = %self.dir.display(), error = %e,
                "request log journal: no segment for a row after close; it is only queued"),
        }
    }

    /// Whether the segment is to be retired: grown past [`SEGMENT_BYTES`], broken by a failed
    /// append, or dirty and as old as the adoption interval.
    fn due(&self, every: Duration) -> bool {
        match self.state.load(Ordering::Relaxed) {
            0 => {}
            BROKEN => return true,
            _ => return false,
        }
        let seg = self.current.read().unwrap_or_else(PoisonError::into_inner);
        let big = seg.file.metadata().is_ok_and(|m| m.len() >= SEGMENT_BYTES);
        big || (self.dirty.load(Ordering::Relaxed) && seg.born.elapsed() >= every)
    }

    /// A fresh segment in place of the current one, which is returned with its dirtiness.
    fn rotate(&self) -> Option<(Segment, bool)> {
        let fresh = match new_segment(&self.dir, self.tag, &self.made) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e,
                    "request log journal: no new segment; the current one grows");
                return None;
            }
        };
        let mut cur = self.current.write().unwrap_or_else(PoisonError::into_inner);
        let old = std::mem::replace(&mut *cur, fresh);
        // Appends go to the fresh segment again (not after a close, which a rotation never
        // follows: the writer closes last).
        self.state.fetch_and(!BROKEN, Ordering::Relaxed);
        Some((old, self.dirty.swap(false, Ordering::Relaxed)))
    }
}

/// A segment of this process's, made under a temporary name and renamed once locked, so no
/// other process ever sees it unlocked.
fn new_segment(dir: &Path, tag: u32, made: &AtomicU64) -> std::io::Result<Segment> {
    let n = made.fetch_add(1, Ordering::Relaxed);
    let (ms, pid) = (crate::clock::unix_ms(), std::process::id());
    let name = format!("{ms}-{pid}-{tag:08x}-{n}");
    let tmp = dir.join(format!("{name}.tmp"));
    let mut file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .read(true)
        .mode_0600()
        .open(&tmp)?;
    file.try_lock().map_err(|e| match e {
        TryLockError::Error(e) => e,
        TryLockError::WouldBlock => std::io::Error::other("a fresh segment is locked"),
    })?;
    file.write_all(HEADER)?;
    let path = dir.join(format!("{name}.{EXT}"));
    std::fs::rename(&tmp, &path)?;
    Ok(Segment {
        file,
        path,
        born: Instant::now(),
    })
}

/// Orphans in `dir`, up to [`ADOPT_BYTES`]; true when more were left for later.
fn adopt(dir: &Path) -> (Vec<Segment>, bool) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (Vec::new(), false);
    };
    let (mut found, mut bytes) = (Vec::new(), 0);
    for path in entries.flatten().map(|e| e.path()) {
        let ext = path.extension().and_then(|e| e.to_str());
        if !matches!(ext, Some(EXT) | Some("tmp")) {
            continue;
        }
        if bytes >= ADOPT_BYTES {
            return (found, true);
        }
        // A young `.tmp` may be a segment being made (locked a moment later): not touched.
        if ext == Some("tmp") && !older_than(&path, Duration::from_secs(60)) {
            continue;
        }
        let Ok(file) = OpenOptions::new().read(true).open(&path) else {
            continue;
        };
        // Held: a live process's segment (this one's too: locks are per open file). Gone or
        // replaced since it was opened: settled by its owner in between.
        if file.try_lock().is_err() || !same_file(&file, &path) {
            continue;
        }
        if ext == Some("tmp") {
            // Made by a process that died before renaming it: it never held a row.
            let _ = std::fs::remove_file(&path);
            continue;
        }
        bytes += file.metadata().map_or(0, |m| m.len());
        found.push(Segment {
            file,
            path,
            born: Instant::now(),
        });
    }
    (found, false)
}

/// `row` as one record at the start of `buf`: its length (4 bytes, little-endian), then its
/// postcard, written in place (the buffer grown and the row written again when too small);
/// the record's length, or `None` when the row cannot be encoded.
fn encode(row: &LogRow, buf: &mut Vec<u8>) -> Option<usize> {
    if buf.len() < 1024 {
        buf.resize(1024, 0);
    }
    loop {
        let size = buf.len();
        match postcard::to_slice(row, &mut buf[4..]).map(|body| body.len()) {
            Ok(len) => {
                buf[..4].copy_from_slice(&u32::try_from(len).ok()?.to_le_bytes());
                return Some(4 + len);
            }
            Err(postcard::Error::SerializeBufferFull) if size < 1 << 24 => buf.resize(size * 2, 0),
            Err(_) => return None,
        }
    }
}

/// Whether `path` still names the file `file` has open.
fn same_file(file: &File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let (Ok(open), Ok(named)) = (file.metadata(), std::fs::metadata(path)) else {
            return false;
        };
        open.dev() == named.dev() && open.ino() == named.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        path.exists()
    }
}

fn older_than(path: &Path, age: Duration) -> bool {
    let modified = std::fs::metadata(path).and_then(|m| m.modified());
    modified.is_ok_and(|t| t.elapsed().is_ok_and(|e| e > age))
}

/// What reading a segment came to.
enum Reading {
    /// Its rows (some perhaps skipped, and said): deleted once the store has them.
    Rows,
    /// It could not be read: kept, to be tried again.
    Failed,
    /// Its format is unknown: renamed `.unknown`, kept for the operator.
    SetAside,
}

/// Every whole row in `seg`. A record cut short (a write torn by a crash of the machine, or
/// a failed append) ends the reading; one that does not decode is skipped; both are said.
fn read_rows(seg: &Segment, rows: &mut Vec<LogRow>) -> Reading {
    let mut bytes = Vec::new();
    if let Err(e) = (&seg.file).read_to_end(&mut bytes) {
        tracing::warn!(path = %seg.path.display(), error = %e,
            "request log journal: a segment could not be read; it is kept");
        return Reading::Failed;
    }
    if !bytes.is_empty() && !bytes.starts_with(HEADER) {
        tracing::warn!(path = %seg.path.display(),
            "request log journal: a segment of an unknown format is set aside (.unknown)");
        let _ = std::fs::rename(&seg.path, seg.path.with_extension("unknown"));
        return Reading::SetAside;
    }
    let mut rest = bytes.get(HEADER.len()..).unwrap_or_default();
    let (mut bad, mut torn) = (0u64, false);
    while let Some((len, after)) = rest.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*len) as usize;
        let Some((record, after)) = after.split_at_checked(len) else {
            torn = true;
            break;
        };
        match postcard::from_bytes::<LogRow>(record) {
            Ok(row) => rows.push(row),
            Err(_) => bad += 1,
        }
        rest = after;
    }
    if bad > 0 || torn || !rest.is_empty() {
        tracing::warn!(path = %seg.path.display(), undecodable = bad, torn,
            "request log journal: records that are no row were skipped");
    }
    Reading::Rows
}

/// Deletes a segment whose rows are all in the store; else lets it go (closing the file
/// drops the lock) for a writer to adopt.
fn settle(seg: Segment, written: bool) {
    if written && let Err(e) = std::fs::remove_file(&seg.path) {
        tracing::warn!(path = %seg.path.display(), error = %e,
            "request log journal: a settled segment could not be deleted; it will be written again");
    }
}

/// Journal files hold no secret, but they are the operator's alone.
trait Private {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Private for OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(self, 0o600);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str) -> LogRow {
        LogRow {
            id: id.into(),
            ..LogRow::default()
        }
    }

    fn rows_in(path: &Path) -> Vec<String> {
        let seg = Segment {
            file: File::open(path).expect("segment"),
            path: path.to_path_buf(),
            born: Instant::now(),
        };
        let mut rows = Vec::new();
        assert!(matches!(read_rows(&seg, &mut rows), Reading::Rows));
        rows.into_iter().map(|r| r.id).collect()
    }

    fn segments(dir: &Path) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .expect("journal dir")
            .flatten()
            .map(|e| e.path())
            .collect();
        found.sort();
        found
    }

    #[test]
    fn close_keeps_a_segment_that_got_a_row_since_the_ticks_start_and_a_late_row_reopens() {
        let dir = tempfile::tempdir().expect("temp dir");
        let j = Journal::open(dir.path()).expect("journal");
        j.append(row("a"), |_| true);
        // A row after the tick's start may not be in its write: the segment stays.
        let (tick, _) = j.begin();
        j.append(row("b"), |_| true);
        j.end(tick, true, true, true);
        assert_eq!(segments(dir.path()).len(), 1, "kept with b");

        // Nothing since: deleted.
        let (tick, _) = j.begin();
        j.end(tick, true, true, true);
        assert!(segments(dir.path()).is_empty());

        // A row after close (a stream cut as the process stops) gets a fresh segment.
        j.append(row("late"), |_| true);
        let after = segments(dir.path());
        assert_eq!(after.len(), 1);
        assert_eq!(rows_in(&after[0]), ["late"]);
    }

    #[test]
    fn an_unreadable_orphan_holds_back_no_other() {
        let dir = tempfile::tempdir().expect("temp dir");
        // Opens and locks, but cannot be read.
        let unreadable = dir.path().join("1-1-0-0.rows");
        std::fs::create_dir(&unreadable).expect("dir");
        let dead = Journal::open(dir.path()).expect("journal");
        dead.append(row("a"), |_| true);
        let orphan = dead.current.read().expect("segment").path.clone();
        drop(dead);

        let j = Journal::open(dir.path()).expect("journal");
        let (tick, rows) = j.begin();
        assert_eq!(rows.len(), 1);
        j.end(tick, true, true, false);
        assert!(!orphan.exists(), "its rows written, the orphan is deleted");
        assert!(unreadable.exists(), "kept");
    }

    #[test]
    fn a_failed_append_stops_appends_to_its_segment_until_the_next_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let j = Journal::open(dir.path()).expect("journal");
        j.append(row("a"), |_| true);
        let first = {
            let mut cur = j.current.write().expect("segment");
            // Appends to a handle open for reading fail, as they would on a full disk.
            cur.file = File::open(&cur.path).expect("segment");
            cur.path.clone()
        };
        j.append(row("b"), |_| true);
        assert_eq!(j.state.load(Ordering::Relaxed), BROKEN);
        j.append(row("c"), |_| true);
        assert_eq!(
            j.append_errors.load(Ordering::Relaxed),
            1,
            "one failure, then no tries"
        );

        let (tick, _) = j.begin();
        assert!(
            tick.retired.is_some(),
            "the broken segment is retired at the next tick"
        );
        j.end(tick, true, true, false);
        assert!(
            !first.exists(),
            "its rows were all queued and written: deleted"
        );
        j.append(row("d"), |_| true);
        let path = j.current.read().expect("segment").path.clone();
        assert_eq!(rows_in(&path), ["d"]);
    }
}
