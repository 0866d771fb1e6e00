//! The store's WAL (format 4) seen from the store: preallocated in place, restarted at the
//! durable point without shrinking, replayed after a crash, and cut to its header on close.

use pretty_assertions::assert_eq;
use sessionlog_format::{Event, SurfaceOp};
use sessionlog_store::embedded::Store;

use crate::faultpos::{CrashImage, CrashWal, Fault};
use crate::support::*;

/// The WAL header of format 4, and the smallest and largest steps the file grows by
/// (docs/format.md, "Write-ahead log").
const WAL_HEADER_BYTES: u64 = 40;
const EXTEND_BYTES_MIN: u64 = 64 << 10;
const EXTEND_BYTES_MAX: u64 = 1 << 20;
/// WAL bytes after which redb is made durable and the WAL restarts.
const DURABLE_BYTES_MAX: u64 = 64 << 20;

fn wal_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path.with_extension("redb.wal"))
        .unwrap()
        .len()
}

fn opening() -> Vec<Event> {
    vec![
        turn_start(0, 1),
        step_start(1, 1, 1),
        system(2, 1, 1, "prompt", SurfaceOp::Append),
    ]
}

/// A user message of `text_bytes` pseudo-random hex digits (so that it does not compress to
/// nothing), different for every seq.
fn big_user(seq: u64, text_bytes: usize) -> Event {
    let mut state = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let text: String = (0..text_bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from_digit((state & 15) as u32, 16).expect("a hex digit")
        })
        .collect();
    user(seq, &text, SurfaceOp::Append, None)
}

// Goal: appends inside the preallocated WAL leave its length unchanged, and a clean close
// cuts it back to its header (a closed store carries no zeros); a reopen holds everything.
#[test]
fn closed_store_keeps_only_the_wal_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let store = Store::open(&path).unwrap();
    assert_eq!(wal_len(&path), WAL_HEADER_BYTES);
    store.create_session(&header("a")).unwrap();
    store.append("a", 0, opening()).unwrap();
    assert_eq!(wal_len(&path), EXTEND_BYTES_MIN);
    for seq in 3..40 {
        store.append("a", seq, vec![title(seq)]).unwrap();
        assert_eq!(wal_len(&path), EXTEND_BYTES_MIN, "seq {seq}");
    }
    drop(store);
    assert_eq!(wal_len(&path), WAL_HEADER_BYTES);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.head("a").unwrap().next_seq, 40);
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
    drop(store);
    assert_eq!(wal_len(&path), WAL_HEADER_BYTES);
}

/// A store holding session `a` (its opening, then titles up to seq `next_seq`), closed
/// cleanly; returns its WAL's bytes, the header only.
fn closed_session(path: &std::path::Path, next_seq: u64) -> Vec<u8> {
    let store = Store::open(path).unwrap();
    store.create_session(&header("a")).unwrap();
    store.append("a", 0, opening()).unwrap();
    if next_seq > 3 {
        store
            .append("a", 3, (3..next_seq).map(title).collect())
            .unwrap();
    }
    drop(store);
    let wal = std::fs::read(path.with_extension("redb.wal")).unwrap();
    assert_eq!(wal.len() as u64, WAL_HEADER_BYTES);
    wal
}

// Goal: a writable open that writes nothing leaves the WAL byte for byte as the clean close
// left it: it takes up a WAL that holds only its header without restarting it (no new
// generation, no sync), and commits nothing of its own to redb (every table is there). redb's
// own open and close still write its header and allocator state.
// Method: a session with a few batches, closed; the WAL read; opened for writing, read (the
// head, the messages, verify), closed; the WAL read again, and the store opened once more.
#[test]
fn a_writable_open_that_writes_nothing_leaves_the_wal_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let closed = closed_session(&path, 20);
    let wal = || std::fs::read(path.with_extension("redb.wal")).unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.head("a").unwrap().next_seq, 20);
    let n_messages = store.with_fold("a", |fold| fold.messages().len()).unwrap();
    assert!(n_messages > 0);
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
    drop(store);
    assert!(
        wal() == closed,
        "a writable open that wrote nothing changed the WAL"
    );
    let store = Store::open(&path).unwrap();
    assert_eq!(store.head("a").unwrap().next_seq, 20);
}

// Goal: a WAL taken up without a restart still logs: an append acknowledged after such an
// open survives a crash, replayed from the frame it wrote in the header's generation.
// Method: a session closed cleanly; opened for writing, one batch appended (an append takes
// no redb transaction, and three events fill no block, so redb's file is the closed one);
// both files copied while the store is open, as a crash would leave them; the copy opened.
#[test]
fn an_append_after_an_open_without_a_restart_survives_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let closed_wal = closed_session(&path, 3);
    let store = Store::open(&path).unwrap();
    store.append("a", 3, (3..6).map(title).collect()).unwrap();
    let copy = dir.path().join("crashed.redb");
    std::fs::copy(&path, &copy).unwrap();
    let wal = std::fs::read(path.with_extension("redb.wal")).unwrap();
    assert_eq!(
        wal[..WAL_HEADER_BYTES as usize],
        closed_wal[..],
        "the header, its generation included, is the closed one"
    );
    std::fs::write(copy.with_extension("redb.wal"), &wal).unwrap();
    drop(store);
    let crashed = Store::open(&copy).unwrap();
    assert_eq!(crashed.head("a").unwrap().next_seq, 6);
    assert!(crashed.verify(&[]).unwrap().iter().all(|r| r.ok()));
}

/// The bytes of a new, empty store file.
fn empty_store() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.redb");
    drop(Store::open(&path).unwrap());
    std::fs::read(&path).unwrap()
}

// Goal: past the durable point the WAL restarts in place: the file keeps its length (at most
// 64 MiB plus one step, one frame and the header), the next frames overwrite the older
// generation's, and after a power loss the reopened store holds every acknowledged event,
// those of the new generation (in the WAL only) included.
// Method: in-memory redb and WAL images (no fault), appends of about 1 MiB records until
// the WAL passed 64 MiB and restarted, a few more appends, then the power is cut and the
// durable images are reopened from files.
#[test]
fn restart_at_the_durable_point_reuses_the_file_and_replays_after_a_power_loss() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let backend = CrashImage::new(Fault::None, empty_store());
    let wal = CrashWal::new(Fault::None);
    let store = Store::open_with_backends(&path, backend.clone(), wal.clone()).unwrap();
    store.create_session(&header("big")).unwrap();
    store.append("big", 0, opening()).unwrap();
    let mut next_seq = 3;
    let mut len_before = 0;
    let mut after_restart = 0;
    while after_restart < 4 {
        assert!(next_seq < 200, "the WAL never restarted");
        store
            .append("big", next_seq, vec![big_user(next_seq, 2 << 20)])
            .unwrap();
        next_seq += 1;
        let (current, _) = wal.images();
        let len = current.len() as u64;
        let bound = DURABLE_BYTES_MAX + EXTEND_BYTES_MAX + (2 << 20) + WAL_HEADER_BYTES;
        assert!(len <= bound, "{len}");
        if restarted(&current) {
            assert_eq!(len, len_before, "a frame after the restart grew the file");
            after_restart += 1;
        }
        len_before = len;
    }
    backend.power_off();
    wal.power_off();
    drop(store);
    std::fs::write(&path, backend.durable()).unwrap();
    std::fs::write(path.with_extension("redb.wal"), wal.images().1).unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.head("big").unwrap().next_seq, next_seq);
    let stored = store.read_range("big", next_seq - 4, next_seq).unwrap();
    let expected: Vec<Event> = (next_seq - 4..next_seq)
        .map(|seq| big_user(seq, 2 << 20))
        .collect();
    assert!(stored == expected, "the new generation's events differ");
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
}

/// Whether the WAL restarted: its first frame (at byte 512, its len after the 8-byte block tag)
/// is then an append of about 1 MiB, where before
/// it is the (small) session creation.
fn restarted(wal: &[u8]) -> bool {
    let first_len = u32::from_le_bytes(wal[520..524].try_into().unwrap());
    first_len > 1 << 19
}

/// A crash image of a store: a session `a` of `n_batches` acknowledged batches of 64 events
/// each (titles), the WAL holding every one of them (redb made none durable); returns the
/// path and the WAL's byte offsets of its frames (the creation, the opening, the batches).
fn crash_image(dir: &tempfile::TempDir, n_batches: u64) -> (std::path::PathBuf, Vec<u64>) {
    let path = store_path(dir);
    let backend = CrashImage::new(Fault::None, empty_store());
    let wal = CrashWal::new(Fault::None);
    let store = Store::open_with_backends(&path, backend.clone(), wal.clone()).unwrap();
    store.create_session(&header("a")).unwrap();
    store.append("a", 0, opening()).unwrap();
    let mut next_seq = 3;
    for _ in 0..n_batches {
        let batch: Vec<Event> = (next_seq..next_seq + 64).map(title).collect();
        store.append("a", next_seq, batch).unwrap();
        next_seq += 64;
    }
    backend.power_off();
    wal.power_off();
    drop(store);
    std::fs::write(&path, backend.durable()).unwrap();
    let wal_bytes = wal.images().1;
    std::fs::write(path.with_extension("redb.wal"), &wal_bytes).unwrap();
    (path, frame_starts(&wal_bytes))
}

/// The offsets of the frames of a format 4 WAL (docs/format.md): from byte 512, each frame is
/// whole 512-byte blocks tagged with the generation, its len after the first tag.
fn frame_starts(wal: &[u8]) -> Vec<u64> {
    let mut starts = Vec::new();
    let mut at = 512;
    let generation = &wal[512..520];
    while wal.len() >= at + 512 && &wal[at..at + 8] == generation {
        starts.push(at as u64);
        let len = u32::from_le_bytes(wal[at + 8..at + 12].try_into().unwrap()) as usize;
        at += (12 + len).div_ceil(504) * 512;
    }
    starts
}

/// The bytes and modification times of both files of a store.
fn snapshot(path: &std::path::Path) -> Vec<(Vec<u8>, std::time::SystemTime)> {
    [path.to_owned(), path.with_extension("redb.wal")]
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p).unwrap();
            (bytes, std::fs::metadata(p).unwrap().modified().unwrap())
        })
        .collect()
}

// Goal: the reproduction of issue #20, finding 1. One byte flipped inside the last complete
// frame of a crash image's WAL was taken for a torn tail: verify said ok with fewer events
// and the clean close emptied the WAL, so the loss was permanent. Now the writable open
// refuses (and changes nothing), the read-only open replays the intact frames in memory and
// verify names the damaged frame and the seqs it held, and neither open writes a byte.
// Method: a crash image with every batch in the WAL; for several offsets inside the last
// frame, flip a byte and open both ways.
#[test]
fn a_flipped_byte_in_the_last_wal_frame_is_reported_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (path, frame_starts) = crash_image(&dir, 4);
    let wal_path = path.with_extension("redb.wal");
    let good = std::fs::read(&wal_path).unwrap();
    let intact = Store::open_read_only(&path).unwrap();
    assert_eq!(intact.head("a").unwrap().next_seq, 3 + 4 * 64);
    drop(intact);
    let last = *frame_starts.last().unwrap() as usize;
    for at in [last, last + 9, last + 20, last + 700, last + 2000] {
        let mut bytes = good.clone();
        bytes[at] ^= 0x10;
        std::fs::write(&wal_path, &bytes).unwrap();
        let before = snapshot(&path);
        let refused = Store::open(&path).unwrap_err().to_string();
        assert!(refused.contains("damaged"), "byte {at}: {refused}");
        assert!(
            snapshot(&path) == before,
            "byte {at}: the writable open wrote"
        );
        let store = Store::open_read_only(&path).unwrap();
        assert_eq!(store.damaged_frames().len(), 1, "byte {at}");
        assert_eq!(store.damaged_frames()[0].offset_bytes, last as u64);
        assert_eq!(store.head("a").unwrap().next_seq, 3 + 3 * 64, "byte {at}");
        let reports = store.verify(&[]).unwrap();
        let fault = reports[0]
            .faults
            .iter()
            .find(|f| f.kind.name() == "wal")
            .unwrap_or_else(|| panic!("byte {at}: no WAL fault in {reports:?}"));
        if at >= last + 20 {
            // The payload's layout still shows which seqs the frame held.
            assert!(
                fault.message.contains("seqs 195..=258") || fault.message.contains("hides"),
                "byte {at}: {}",
                fault.message
            );
        }
        assert!(store.append("a", 195, vec![title(195)]).is_err());
        drop(store);
        assert!(
            snapshot(&path) == before,
            "byte {at}: the read-only open wrote"
        );
    }
}

// Goal: a damaged byte in an earlier frame no longer makes the whole store refuse to open
// (issue #20, finding 1): the read-only open replays every other frame, verify names the
// damaged frame and the seqs it held, and the session's records before it read back.
#[test]
fn a_flipped_byte_in_an_earlier_wal_frame_leaves_the_rest_readable() {
    let dir = tempfile::tempdir().unwrap();
    let (path, frame_starts) = crash_image(&dir, 4);
    let wal_path = path.with_extension("redb.wal");
    let mut bytes = std::fs::read(&wal_path).unwrap();
    let damaged = frame_starts[3] as usize;
    bytes[damaged + 300] ^= 0x04;
    std::fs::write(&wal_path, &bytes).unwrap();
    assert!(Store::open(&path).is_err());
    let store = Store::open_read_only(&path).unwrap();
    assert_eq!(store.damaged_frames().len(), 1);
    let reports = store.verify(&[]).unwrap();
    let kinds: Vec<&str> = reports[0].faults.iter().map(|f| f.kind.name()).collect();
    assert!(kinds.contains(&"wal"), "{:?}", reports[0].faults);
    assert!(!reports[0].ok());
    let before = store.read_range("a", 0, 67).unwrap();
    assert_eq!(before.len(), 67);
}

// Goal: salvage of a store whose WAL's last frame is damaged writes the session's intact
// events (the frames before the damage) as a V3 log and names the loss from the first seq
// the damaged frame held; the store's files are not written.
#[test]
fn salvage_writes_the_intact_events_and_names_the_loss() {
    let dir = tempfile::tempdir().unwrap();
    let (path, frame_starts) = crash_image(&dir, 4);
    let wal_path = path.with_extension("redb.wal");
    let mut bytes = std::fs::read(&wal_path).unwrap();
    bytes[*frame_starts.last().unwrap() as usize + 1000] ^= 0x01;
    std::fs::write(&wal_path, &bytes).unwrap();
    let before = snapshot(&path);
    let store = Store::open_read_only(&path).unwrap();
    let out = dir.path().join("salvaged");
    let report = sessionlog_store::salvage::salvage(&store, &out).unwrap();
    assert!(!report.complete());
    assert_eq!(report.written.len(), 1);
    assert_eq!(report.written[0].events, 3 + 3 * 64);
    assert_eq!(report.lost.len(), 1);
    assert_eq!(report.lost[0].from_seq, Some(3 + 3 * 64));
    assert_eq!(report.damaged_frames.len(), 1);
    drop(store);
    assert!(snapshot(&path) == before);
    let written = std::fs::read_to_string(&report.written[0].file).unwrap();
    assert_eq!(
        written.lines().count(),
        1 + 3 + 3 * 64,
        "the header and every event"
    );
}
