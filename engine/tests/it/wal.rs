//! The store's WAL (format 3) seen from the store: preallocated in place, restarted at the
//! durable point without shrinking, replayed after a crash, and cut to its header on close.

use pretty_assertions::assert_eq;
use sessionlog_engine::store::Store;
use sessionlog_format::{Event, SurfaceOp};

use crate::faultpos::{CrashImage, CrashWal, Fault};
use crate::support::*;

/// The WAL header of format 3, and the smallest and largest steps the file grows by
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

/// Whether the WAL restarted: its first frame is then an append of about 1 MiB, where before
/// it is the (small) session creation.
fn restarted(wal: &[u8]) -> bool {
    let first_len = u32::from_le_bytes(wal[40..44].try_into().unwrap());
    first_len > 1 << 19
}
