//! Tests of the write-ahead log: replay, torn tails, generations, preallocation and failures.

use std::sync::{Arc, Mutex};

use pretty_assertions::assert_eq;

use super::*;

fn frame(entries: &[(u64, u64, &[u8])]) -> FrameBuilder {
    let mut builder = FrameBuilder::default();
    for (key, seq, record) in entries {
        builder.push(*key, *seq, record);
    }
    builder
}

fn event(key: u64, seq: u64, record: &[u8]) -> WalEntry {
    WalEntry::Event {
        key,
        seq,
        record: record.to_vec(),
    }
}

fn replay(path: &Path) -> Vec<WalEntry> {
    let (_, replay) = Wal::open(path).unwrap();
    assert_eq!(replay.damaged, Vec::new());
    replay.entries
}

/// The positions of a frame's bytes that carry data: its tags and its stream up to the end of
/// the payload (not the zeros that pad its last block).
fn data_positions(start: usize, payload_len: usize) -> Vec<usize> {
    let stream_len = FRAME_HEADER_BYTES + payload_len;
    let n_blocks = stream_len.div_ceil(BLOCK_BODY_BYTES);
    (0..n_blocks * BLOCK_BYTES as usize)
        .filter(|idx| {
            let (block, in_block) = (idx / BLOCK_BYTES as usize, idx % BLOCK_BYTES as usize);
            in_block < TAG_BYTES || block * BLOCK_BODY_BYTES + in_block - TAG_BYTES < stream_len
        })
        .map(|idx| start + idx)
        .collect()
}

/// The payload length of a frame of one event entry of `record_len` bytes.
fn one_event_payload_len(record_len: usize) -> usize {
    4 + 1 + ENTRY_HEADER_BYTES + record_len
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

// Goal: frames written are the entries replayed, in order, across a reopen.
#[test]
fn frames_replay_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.wal");
    let (mut wal, replayed) = Wal::open(&path).unwrap();
    assert!(replayed.entries.is_empty() && replayed.damaged.is_empty());
    wal.append(frame(&[(0, 0, b"a"), (0, 1, b"bb")])).unwrap();
    wal.append(frame(&[(1, 0, b"ccc")])).unwrap();
    drop(wal);
    assert_eq!(
        replay(&path),
        vec![event(0, 0, b"a"), event(0, 1, b"bb"), event(1, 0, b"ccc")]
    );
}

/// Writes two frames, returns the file's bytes and where the first frame ends.
fn two_frames(path: &Path) -> (Vec<u8>, usize, usize) {
    let (mut wal, _) = Wal::open(path).unwrap();
    wal.append(frame(&[(0, 0, b"first")])).unwrap();
    let first_end = wal.end_bytes as usize;
    wal.append(frame(&[(0, 1, &[2; 700]), (0, 2, &[3; 800])]))
        .unwrap();
    let second_end = wal.end_bytes as usize;
    drop(wal);
    (std::fs::read(path).unwrap(), first_end, second_end)
}

// Goal: a torn last frame is dropped at every cut, whatever follows the cut: the end of the
// file (a frame that grew it, cut at any byte), or, at every block boundary (the medium
// persists whole blocks), the preallocated zeros or stale blocks of an older generation.
// Method: write two frames, the second of several blocks, then rebuild the file with the
// second frame cut at each point and reopen.
#[test]
fn torn_tail_is_dropped_at_every_cut() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.wal");
    let (full, first_end, second_end) = two_frames(&path);
    assert!(
        full.len() as u64 >= EXTEND_BYTES_MIN,
        "the file was preallocated"
    );
    assert!(second_end - first_end >= 3 * BLOCK_BYTES as usize);
    let older_generation = next_generation(GENERATION_STEP).wrapping_add(GENERATION_STEP);
    for cut in first_end..second_end {
        std::fs::write(&path, &full[..cut]).unwrap();
        let (wal, replayed) = Wal::open(&path).unwrap();
        assert_eq!(
            replayed.entries,
            vec![event(0, 0, b"first")],
            "cut at {cut}"
        );
        assert_eq!(replayed.damaged, Vec::new(), "cut at {cut}");
        assert_eq!(wal.end_bytes, first_end as u64, "cut at {cut}");
    }
    let blocks = (first_end..second_end).step_by(BLOCK_BYTES as usize);
    for lost in blocks.clone() {
        let mut stale = full.clone();
        let mut block = vec![0x5a; BLOCK_BYTES as usize];
        block[..8].copy_from_slice(&older_generation.to_le_bytes());
        stale[lost..lost + BLOCK_BYTES as usize].copy_from_slice(&block);
        let mut zeros = full.clone();
        zeros[lost..lost + BLOCK_BYTES as usize].fill(0);
        for (what, bytes) in [("zeros", &zeros), ("stale", &stale)] {
            std::fs::write(&path, bytes).unwrap();
            let (wal, replayed) = Wal::open(&path).unwrap();
            let case = format!("block at {lost} lost, {what}");
            assert_eq!(replayed.entries, vec![event(0, 0, b"first")], "{case}");
            assert_eq!(replayed.damaged, Vec::new(), "{case}");
            assert_eq!(wal.end_bytes, first_end as u64, "{case}");
        }
    }
}

// Goal: after a restart, the frames of the older generation left in the file are never
// replayed: not when no new frame was written, not after a shorter new frame, and not after a
// torn new frame (which is a torn tail, not corruption).
#[test]
fn stale_frames_of_an_older_generation_are_not_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.wal");
    let (mut wal, _) = Wal::open(&path).unwrap();
    for seq in 0..3 {
        wal.append(frame(&[(0, seq, b"an older generation's record")]))
            .unwrap();
    }
    wal.restart().unwrap();
    drop(wal);
    assert_eq!(replay(&path), Vec::new());

    let (mut wal, _) = Wal::open(&path).unwrap();
    wal.restart().unwrap();
    wal.append(frame(&[(1, 0, b"new")])).unwrap();
    let new_end = wal.end_bytes as usize;
    drop(wal);
    assert_eq!(replay(&path), vec![event(1, 0, b"new")]);

    // Tear the new frame (its block never landed: the stale block is back): the stale frames
    // after it still do not count, nor make it damage.
    let stale = std::fs::read(&path).unwrap();
    let (mut wal, _) = Wal::open(&path).unwrap();
    wal.restart().unwrap();
    wal.append(frame(&[(1, 1, b"torn")])).unwrap();
    drop(wal);
    let mut bytes = std::fs::read(&path).unwrap();
    let start = FRAMES_START_BYTES as usize;
    bytes[start..new_end].copy_from_slice(&stale[start..new_end]);
    std::fs::write(&path, &bytes).unwrap();
    let (wal, replayed) = Wal::open(&path).unwrap();
    assert_eq!(replayed.entries, Vec::new());
    assert_eq!(replayed.damaged, Vec::new());
    assert_eq!(wal.end_bytes, FRAMES_START_BYTES);
}

// Goal: a frame of the same length as the stale one under it, torn (its second block never
// landed), is not mistaken for damage: the stale block carries another generation.
#[test]
fn torn_frame_over_equal_stale_frames_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.wal");
    let (mut wal, _) = Wal::open(&path).unwrap();
    for seq in 0..4 {
        wal.append(frame(&[(0, seq, &[9; 600])])).unwrap();
    }
    let stale = std::fs::read(&path).unwrap();
    wal.restart().unwrap();
    wal.append(frame(&[(0, 0, &[9; 600])])).unwrap();
    let torn_start = wal.end_bytes as usize;
    wal.append(frame(&[(0, 1, &[9; 600])])).unwrap();
    drop(wal);
    let mut bytes = std::fs::read(&path).unwrap();
    let second_block = torn_start + BLOCK_BYTES as usize;
    bytes[second_block..second_block + BLOCK_BYTES as usize]
        .copy_from_slice(&stale[second_block..second_block + BLOCK_BYTES as usize]);
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(replay(&path), vec![event(0, 0, &[9; 600])]);
}

// Goal: appends within the preallocated region and across a restart leave the file's length
// unchanged (so their fdatasync carries no size change); passing the end grows the file by a
// whole step; a clean close cuts it back to its header.
#[test]
fn file_len_is_constant_within_a_step_and_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.wal");
    let (mut wal, _) = Wal::open(&path).unwrap();
    assert_eq!(file_len(&path), HEADER_BYTES);
    wal.append(frame(&[(0, 0, b"x")])).unwrap();
    assert_eq!(file_len(&path), EXTEND_BYTES_MIN);
    for seq in 1..100 {
        wal.append(frame(&[(0, seq, &[7; 100])])).unwrap();
        assert_eq!(file_len(&path), EXTEND_BYTES_MIN, "seq {seq}");
    }
    wal.restart().unwrap();
    assert_eq!(file_len(&path), EXTEND_BYTES_MIN);
    for seq in 0..100 {
        wal.append(frame(&[(0, seq, &[8; 100])])).unwrap();
        assert_eq!(
            file_len(&path),
            EXTEND_BYTES_MIN,
            "after the restart, seq {seq}"
        );
    }
    // Past the end: one step of the file's length (within the limits), a whole number of them.
    wal.append(frame(&[(0, 100, &[9; 140_000])])).unwrap();
    assert_eq!(file_len(&path), 3 * EXTEND_BYTES_MIN);
    assert_eq!(wal.file_len_bytes, 3 * EXTEND_BYTES_MIN);
    wal.restart().unwrap();
    wal.cut_to_header().unwrap();
    assert_eq!(file_len(&path), HEADER_BYTES);
    drop(wal);
    assert_eq!(replay(&path), Vec::new());
}

// Goal: each growth step is as long as the file so far, within the limits, so the file never
// passes the durable point by more than one frame and one step.
#[test]
fn extension_steps_stay_within_the_limits() {
    assert_eq!(
        extended_len_bytes(HEADER_BYTES + 40, HEADER_BYTES),
        EXTEND_BYTES_MIN
    );
    assert_eq!(
        extended_len_bytes(EXTEND_BYTES_MIN + 1, EXTEND_BYTES_MIN),
        2 * EXTEND_BYTES_MIN
    );
    assert_eq!(extended_len_bytes(300 << 10, 256 << 10), 512 << 10);
    let at_durable_point = DURABLE_BYTES_MAX + HEADER_BYTES;
    assert_eq!(
        extended_len_bytes(at_durable_point + 1, at_durable_point),
        DURABLE_BYTES_MAX + EXTEND_BYTES_MAX
    );
}

// Goal: the finding of issue #20 (one flipped byte inside the last complete frame was taken
// for a torn tail, and the acknowledged events it held were dropped for good): a byte flipped
// at any data offset of either of the last two frames (tags, header, payload) is a damaged
// frame named by its offset, with the seqs it held where its payload still shows them, and
// every other frame still replays; never fewer events without a damaged frame.
#[test]
fn a_byte_flipped_in_any_frame_is_damage_never_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.wal");
    let (good, first_end, second_end) = two_frames(&path);
    let first = FRAMES_START_BYTES as usize;
    let frames = [
        (first, one_event_payload_len(5), vec![event(0, 0, b"first")]),
        (
            first_end,
            4 + 2 * (1 + ENTRY_HEADER_BYTES) + 700 + 800,
            vec![event(0, 1, &[2; 700]), event(0, 2, &[3; 800])],
        ),
    ];
    let all = replay(&path);
    assert_eq!(all.len(), 3);
    let mut n_flips = 0;
    for (frame_idx, (start, payload_len, held)) in frames.iter().enumerate() {
        let positions = data_positions(*start, *payload_len);
        assert!(positions.iter().all(|&p| p < second_end));
        for at in positions {
            for flip in [0x01, 0x80, 0xff] {
                let mut bytes = good.clone();
                bytes[at] ^= flip;
                std::fs::write(&path, &bytes).unwrap();
                let (_, replayed) = Wal::open(&path).unwrap();
                let case = format!("frame {frame_idx}, byte {at} ^ {flip:#x}");
                assert_eq!(replayed.damaged.len(), 1, "{case}");
                let damaged = &replayed.damaged[0];
                assert_eq!(damaged.offset_bytes, *start as u64, "{case}");
                assert_eq!(damaged.frame_idx, frame_idx as u64, "{case}");
                let kept: Vec<WalEntry> =
                    all.iter().filter(|e| !held.contains(e)).cloned().collect();
                assert_eq!(replayed.entries, kept, "{case}");
                n_flips += 1;
            }
        }
    }
    assert!(n_flips > 3 * 1500, "{n_flips} flips");
    // A flip in the payload leaves the entries' layout readable: the seqs are named.
    let mut bytes = good.clone();
    let payload_start = first_end + TAG_BYTES + FRAME_HEADER_BYTES;
    bytes[payload_start + 4 + 1 + ENTRY_HEADER_BYTES + 10] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let (_, replayed) = Wal::open(&path).unwrap();
    assert_eq!(replayed.damaged[0].events, vec![(0, 1), (0, 2)]);
}

// Goal: a frame whose first block is lost (zeros) while a valid frame follows is damage: frames
// are written in order, so the later frame proves this one was written and acknowledged.
#[test]
fn a_lost_frame_before_a_valid_one_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.wal");
    let (mut bytes, first_end, _) = two_frames(&path);
    let first = FRAMES_START_BYTES as usize;
    bytes[first..first_end].fill(0);
    std::fs::write(&path, &bytes).unwrap();
    let (_, replayed) = Wal::open(&path).unwrap();
    assert_eq!(replayed.damaged.len(), 1);
    assert_eq!(replayed.damaged[0].offset_bytes, first as u64);
    assert_eq!(
        replayed.entries,
        vec![event(0, 1, &[2; 700]), event(0, 2, &[3; 800])]
    );
}

/// A 16-byte header of an older version.
fn old_header(version: u32) -> Vec<u8> {
    let mut bytes = WAL_MAGIC.to_vec();
    bytes.extend_from_slice(&version.to_le_bytes());
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// Appends a version 1 or 2 frame (`len | crc32 of payload | payload`).
fn push_old_frame(bytes: &mut Vec<u8>, payload: &[u8]) {
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    bytes.extend_from_slice(payload);
}

/// A version 1 WAL (no entry tags) holding one frame of `entries`.
fn v1_wal(entries: &[(u64, u64, &[u8])]) -> Vec<u8> {
    let mut bytes = old_header(WAL_VERSION_EVENTS_ONLY);
    let mut payload = (entries.len() as u32).to_le_bytes().to_vec();
    for (key, seq, record) in entries {
        payload.extend_from_slice(&key.to_le_bytes());
        payload.extend_from_slice(&seq.to_le_bytes());
        payload.extend_from_slice(&(record.len() as u32).to_le_bytes());
        payload.extend_from_slice(record);
    }
    push_old_frame(&mut bytes, &payload);
    bytes
}

/// Opens an older WAL, checks its replay, restarts it and checks that it is now a version 3
/// WAL in a file cut to its new header, whose next frame replays alone.
fn check_old_wal_is_rewritten(bytes: &[u8], version: u32, expected: Vec<WalEntry>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.wal");
    std::fs::write(&path, bytes).unwrap();
    let (mut wal, replayed) = Wal::open(&path).unwrap();
    assert_eq!(replayed.entries, expected);
    assert_eq!(wal.version, version);
    wal.restart().unwrap();
    assert_eq!(file_len(&path), HEADER_BYTES);
    let mut session = FrameBuilder::default();
    session.push_session(b"session record");
    wal.append(session).unwrap();
    drop(wal);
    let rewritten = std::fs::read(&path).unwrap();
    assert_eq!(rewritten[8..12], WAL_VERSION.to_le_bytes());
    assert_eq!(
        replay(&path),
        vec![WalEntry::Session {
            record: b"session record".to_vec()
        }]
    );
}

// Goal: a WAL written by a version 1 build (events only, no tags) still replays, and once
// emptied it is rewritten in this build's version, so new frames are never written under an
// old header.
#[test]
fn version_1_wal_replays_and_is_rewritten() {
    check_old_wal_is_rewritten(
        &v1_wal(&[(3, 0, b"a"), (3, 1, b"bb")]),
        WAL_VERSION_EVENTS_ONLY,
        vec![event(3, 0, b"a"), event(3, 1, b"bb")],
    );
}

// Goal: a WAL written by a version 2 build (tagged entries, frames appended, a torn tail)
// replays its valid frames and is rewritten as version 3.
#[test]
fn version_2_wal_replays_and_is_rewritten_as_v3() {
    let mut bytes = old_header(WAL_VERSION_APPENDED);
    let mut session = (1u32).to_le_bytes().to_vec();
    session.push(ENTRY_TAG_SESSION);
    session.extend_from_slice(&(7u32).to_le_bytes());
    session.extend_from_slice(b"session");
    push_old_frame(&mut bytes, &session);
    let mut events = (1u32).to_le_bytes().to_vec();
    events.push(ENTRY_TAG_EVENT);
    events.extend_from_slice(&5u64.to_le_bytes());
    events.extend_from_slice(&0u64.to_le_bytes());
    events.extend_from_slice(&(3u32).to_le_bytes());
    events.extend_from_slice(b"abc");
    push_old_frame(&mut bytes, &events);
    // A torn third frame.
    bytes.extend_from_slice(&(100u32).to_le_bytes());
    bytes.extend_from_slice(&[1, 2, 3]);
    let expected = vec![
        WalEntry::Session {
            record: b"session".to_vec(),
        },
        event(5, 0, b"abc"),
    ];
    check_old_wal_is_rewritten(&bytes, WAL_VERSION_APPENDED, expected);
}

// Goal: a WAL of a newer version is refused with UpgradeRequired; a version 3 header keeps a
// version 2 build's header as its prefix (so that build refuses it the same way); a damaged
// generation in both slots, or slots that do not follow each other, are corruption; an
// unknown entry tag makes its frame invalid.
#[test]
fn newer_version_and_unknown_tags_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.wal");
    std::fs::write(&path, old_header(WAL_VERSION + 1)).unwrap();
    assert!(matches!(
        Wal::open(&path),
        Err(StoreError::UpgradeRequired {
            found: 5,
            supported: 4
        })
    ));
    let header = encode_new_header(GENERATION_STEP);
    assert_eq!(header[..16], old_header(WAL_VERSION)[..]);
    let mut damaged = header.clone();
    damaged[18] ^= 1;
    damaged[30] ^= 1;
    std::fs::write(&path, &damaged).unwrap();
    assert!(matches!(
        Wal::open(&path),
        Err(StoreError::Corrupt { reason }) if reason.contains("both generation slots")
    ));
    let mut disagreeing = header.clone();
    disagreeing[16..28].copy_from_slice(&encode_slot(7));
    std::fs::write(&path, &disagreeing).unwrap();
    assert!(matches!(
        Wal::open(&path),
        Err(StoreError::Corrupt { reason }) if reason.contains("disagree")
    ));
    std::fs::write(&path, &header[..30]).unwrap();
    assert!(matches!(Wal::open(&path), Err(StoreError::Corrupt { .. })));
    let unknown_tag = b"\x01\0\0\0\x07";
    assert_eq!(parse_entries(unknown_tag, WAL_VERSION), None);
}

// Goal: restart empties the WAL down to its header without shrinking the file.
#[test]
fn restart_empties() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.wal");
    let (mut wal, _) = Wal::open(&path).unwrap();
    wal.append(frame(&[(0, 0, b"x")])).unwrap();
    assert!(wal.frames_len_bytes() > 0);
    let generation = wal.generation;
    wal.restart().unwrap();
    assert_eq!(wal.frames_len_bytes(), 0);
    assert_ne!(wal.generation, generation);
    drop(wal);
    assert_eq!(file_len(&path), EXTEND_BYTES_MIN);
    assert!(replay(&path).is_empty());
}

/// An in-memory WAL file with a durable image (what a power loss leaves), whose N-th write
/// (`write_all_at` or `set_len`) or N-th sync fails; clones share the image.
#[derive(Debug, Clone, Default)]
struct MemFile {
    image: Arc<Mutex<MemImage>>,
}

#[derive(Debug, Default)]
struct MemImage {
    current: Vec<u8>,
    durable: Vec<u8>,
    writes: u64,
    syncs: u64,
    fail_write: Option<u64>,
    fail_sync: Option<u64>,
}

impl MemFile {
    fn failing(fail_write: Option<u64>, fail_sync: Option<u64>) -> MemFile {
        let file = MemFile::default();
        file.image.lock().unwrap().fail_write = fail_write;
        file.image.lock().unwrap().fail_sync = fail_sync;
        file
    }

    fn images(&self) -> (Vec<u8>, Vec<u8>) {
        let image = self.image.lock().unwrap();
        (image.current.clone(), image.durable.clone())
    }

    fn write_op(image: &mut MemImage) -> io::Result<()> {
        image.writes += 1;
        if image.fail_write == Some(image.writes - 1) {
            return Err(io::Error::other("injected write failure"));
        }
        Ok(())
    }

    fn sync_op(&self) -> io::Result<()> {
        let mut image = self.image.lock().unwrap();
        image.syncs += 1;
        if image.fail_sync == Some(image.syncs - 1) {
            return Err(io::Error::other("injected sync failure"));
        }
        image.durable = image.current.clone();
        Ok(())
    }
}

impl WalFile for MemFile {
    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        Ok(self.image.lock().unwrap().current.clone())
    }

    fn write_all_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let mut image = self.image.lock().unwrap();
        MemFile::write_op(&mut image)?;
        let start = offset as usize;
        if start + bytes.len() > image.current.len() {
            image.current.resize(start + bytes.len(), 0);
        }
        image.current[start..start + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let mut image = self.image.lock().unwrap();
        MemFile::write_op(&mut image)?;
        image.current.resize(len as usize, 0);
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.sync_op()
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.sync_op()
    }
}

/// The entries a reopen of `bytes` replays.
fn replay_bytes(bytes: Vec<u8>) -> Vec<WalEntry> {
    let file = MemFile::default();
    file.image.lock().unwrap().current = bytes;
    let (_, replay) = Wal::open_file(Path::new("mem.wal"), Box::new(file)).unwrap();
    assert_eq!(replay.damaged, Vec::new());
    replay.entries
}

// Goal: a frame whose write or sync fails is never replayed, from the process's view of the
// file (a crash) or from its durable image (a power loss), including a frame that had to grow
// the file (which is cut back); the frames before it still replay.
// Method: the operations of opening and two appends are: write 0 (set_len), write 1 (header),
// sync 0, write 2 (frame 1, grows the file), sync 1, write 3 (frame 2), sync 2. Fail each
// write and sync of the appends in turn.
#[test]
fn failed_frame_write_or_sync_is_never_replayed() {
    let cases = [
        (Some(2), None, true),
        (None, Some(1), true),
        (Some(3), None, false),
        (None, Some(2), false),
    ];
    for (fail_write, fail_sync, first_fails) in cases {
        let case = format!("write {fail_write:?}, sync {fail_sync:?}");
        let file = MemFile::failing(fail_write, fail_sync);
        let (mut wal, _) = Wal::open_file(Path::new("mem.wal"), Box::new(file.clone())).unwrap();
        let first = wal.append(frame(&[(0, 0, b"first")]));
        assert_eq!(first.is_err(), first_fails, "{case}");
        if first.is_ok() {
            assert!(wal.append(frame(&[(0, 1, b"second")])).is_err(), "{case}");
        }
        drop(wal);
        let (current, durable) = file.images();
        let expected = if first_fails {
            assert_eq!(
                current.len() as u64,
                HEADER_BYTES,
                "{case}: the growth is cut back"
            );
            Vec::new()
        } else {
            vec![event(0, 0, b"first")]
        };
        assert_eq!(replay_bytes(current), expected, "{case}: crash");
        assert_eq!(replay_bytes(durable), expected, "{case}: power loss");
    }
}

// Goal: the frame of a group that redb refused to commit, invalidated after its sync, is
// never replayed; the frames before it are, and the next append reuses its place.
#[test]
fn invalidated_frame_is_never_replayed() {
    let file = MemFile::default();
    let (mut wal, _) = Wal::open_file(Path::new("mem.wal"), Box::new(file.clone())).unwrap();
    wal.append(frame(&[(0, 0, b"kept")])).unwrap();
    let kept_end = wal.end_bytes;
    wal.append(frame(&[(0, 1, b"refused")])).unwrap();
    wal.invalidate_last_frame().unwrap();
    assert_eq!(wal.end_bytes, kept_end);
    let (current, durable) = file.images();
    assert_eq!(replay_bytes(current), vec![event(0, 0, b"kept")]);
    assert_eq!(replay_bytes(durable), vec![event(0, 0, b"kept")]);
    wal.append(frame(&[(0, 1, b"again")])).unwrap();
    let (current, _) = file.images();
    assert_eq!(
        replay_bytes(current),
        vec![event(0, 0, b"kept"), event(0, 1, b"again")]
    );
}

/// A seeded xorshift generator: the randomized test below prints its seed on failure.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One seeded run: random appends (of random sizes, so that new frames straddle stale ones)
/// and restarts, then one more append in flight whose 512-byte blocks reach the medium in
/// any subset (the rest keep their old bytes, zeros past the old end). The reopen must replay
/// exactly the acknowledged frames since the last restart, plus the frame in flight only if
/// all of it landed, and never report corruption; or a restart is in flight and its slot
/// is torn, and the reopen replays the acknowledged frames of the older generation. Then a byte flipped in an acknowledged
/// frame that is not the last must be reported as corruption.
fn check_random_run(seed: u64) {
    let case = format!("seed {seed}");
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let file = MemFile::default();
    let (mut wal, _) = Wal::open_file(Path::new("mem.wal"), Box::new(file.clone())).unwrap();
    let mut acked: Vec<(WalEntry, u64, u64)> = Vec::new();
    let mut seq = 0;
    for _ in 0..rng.below(60) {
        if rng.below(10) == 0 {
            wal.restart().unwrap();
            acked.clear();
        } else {
            acked.push(append_random(&mut wal, &mut rng, &mut seq));
        }
    }
    if rng.below(4) == 0 {
        // A restart torn before its sync: its slot fails its crc, the old generation stays.
        wal.restart().unwrap();
        let (mut torn, _) = file.images();
        let slot = slot_offset_bytes(wal.slot_idx) as usize;
        torn[slot + rng.below(SLOT_BYTES) as usize] ^= 1 + rng.below(255) as u8;
        let expected: Vec<WalEntry> = acked.iter().map(|(e, _, _)| e.clone()).collect();
        let replayed = replay_or_error(torn).unwrap();
        assert_eq!(replayed.entries, expected, "{case}: torn restart");
        assert_eq!(replayed.damaged, Vec::new(), "{case}: torn restart");
        return;
    }
    let (before, _) = file.images();
    let in_flight = append_random(&mut wal, &mut rng, &mut seq);
    let (after, _) = file.images();
    let mut torn = after.clone();
    let mut landed = true;
    let first_block = in_flight.1 as usize / 512;
    let last_block = (in_flight.2 as usize - 1) / 512;
    for block in first_block..=last_block {
        if rng.below(2) == 0 {
            continue;
        }
        landed = false;
        let start = block * 512;
        let end = ((block + 1) * 512).min(torn.len());
        for (idx, byte) in torn[start..end].iter_mut().enumerate() {
            *byte = before.get(start + idx).copied().unwrap_or(0);
        }
    }
    let expected: Vec<WalEntry> = acked.iter().map(|(e, _, _)| e.clone()).collect();
    let reopened = replay_or_error(torn);
    let all_landed = {
        let mut with = expected.clone();
        with.push(in_flight.0.clone());
        with
    };
    match reopened {
        Ok(replayed) if !replayed.damaged.is_empty() => {
            panic!("{case}: a torn tail reported as {:?}", replayed.damaged)
        }
        Ok(replayed) if landed => assert_eq!(replayed.entries, all_landed, "{case}"),
        // A torn frame whose lost blocks held the same bytes as before may still be whole.
        Ok(replayed) if replayed.entries == all_landed => {}
        Ok(replayed) => assert_eq!(replayed.entries, expected, "{case}"),
        Err(error) => panic!("{case}: a torn tail reported as {error:?}"),
    }
    if !acked.is_empty() {
        // Any acknowledged frame, the last one included: a flipped data byte is a damaged
        // frame at its offset, and every other acknowledged frame still replays.
        let damaged_idx = rng.below(acked.len() as u64) as usize;
        let (entry, start, _) = &acked[damaged_idx];
        let WalEntry::Event { record, .. } = entry else {
            unreachable!("the run appends events")
        };
        let positions = data_positions(*start as usize, one_event_payload_len(record.len()));
        let at = positions[rng.below(positions.len() as u64) as usize];
        let mut damaged = before;
        damaged[at] ^= 1 + rng.below(255) as u8;
        let replayed = replay_or_error(damaged).unwrap();
        let case = format!(
            "{case}: damage at byte {at} in frame {damaged_idx} of {}",
            acked.len()
        );
        assert_eq!(replayed.damaged.len(), 1, "{case}");
        assert_eq!(replayed.damaged[0].offset_bytes, *start, "{case}");
        let kept: Vec<WalEntry> = acked
            .iter()
            .enumerate()
            .filter(|(idx, _)| *idx != damaged_idx)
            .map(|(_, (e, _, _))| e.clone())
            .collect();
        assert_eq!(replayed.entries, kept, "{case}");
    }
}

/// Appends a frame of one event of a random size; returns it and where its frame lies.
fn append_random(wal: &mut Wal, rng: &mut Rng, seq: &mut u64) -> (WalEntry, u64, u64) {
    let len_max = if rng.below(8) == 0 { 40_000 } else { 600 };
    let len = 1 + rng.below(len_max) as usize;
    let record: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    let start = wal.end_bytes;
    wal.append(frame(&[(0, *seq, &record)])).unwrap();
    *seq += 1;
    (event(0, *seq - 1, &record), start, wal.end_bytes)
}

fn replay_or_error(bytes: Vec<u8>) -> Result<Replay, StoreError> {
    let file = MemFile::default();
    file.image.lock().unwrap().current = bytes;
    Wal::open_file(Path::new("mem.wal"), Box::new(file)).map(|(_, replay)| replay)
}

// Goal: the rules for the end of the log hold under any mix of appends, restarts, torn
// writes and damage: a torn tail is never corruption and never hides an acknowledged frame;
// damage before the tail is always corruption. Method: 300 seeded runs (check_random_run).
#[test]
fn random_appends_restarts_and_tears_recover_the_acknowledged_frames() {
    for seed in 0..300 {
        check_random_run(seed);
    }
}

// Goal: a restart torn before its sync (the new generation's slot fails its crc) falls back to
// the other slot, whose frames are intact (and, in the store, already durable in redb); the
// same damage once a frame of the new generation exists is corruption; damage to the older
// slot changes nothing.
#[test]
fn torn_generation_slot_falls_back_to_the_previous_generation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.wal");
    let (mut wal, _) = Wal::open(&path).unwrap();
    wal.append(frame(&[(0, 0, b"before the restart")])).unwrap();
    wal.restart().unwrap();
    let new_slot = slot_offset_bytes(wal.slot_idx) as usize;
    let old_slot = slot_offset_bytes(1 - wal.slot_idx) as usize;
    drop(wal);
    let restarted = std::fs::read(&path).unwrap();
    let mut torn = restarted.clone();
    torn[new_slot + 3] ^= 0x21;
    std::fs::write(&path, &torn).unwrap();
    assert_eq!(replay(&path), vec![event(0, 0, b"before the restart")]);

    let mut old_damaged = restarted.clone();
    old_damaged[old_slot + 9] ^= 4;
    std::fs::write(&path, &old_damaged).unwrap();
    assert_eq!(replay(&path), Vec::new());

    std::fs::write(&path, &restarted).unwrap();
    let (mut wal, _) = Wal::open(&path).unwrap();
    assert_eq!(slot_offset_bytes(wal.slot_idx) as usize, new_slot);
    wal.append(frame(&[(0, 1, b"after the restart")])).unwrap();
    drop(wal);
    let mut damaged = std::fs::read(&path).unwrap();
    damaged[new_slot + 3] ^= 0x21;
    std::fs::write(&path, &damaged).unwrap();
    assert!(matches!(
        Wal::open(&path),
        Err(StoreError::Corrupt { reason }) if reason.contains("current generation is damaged")
    ));
}

// Goal: a version 3 WAL (frames in place, the generation in each frame's header) still
// replays, a damaged frame before its tail is still corruption, and once emptied it is
// rewritten as version 4.
#[test]
fn version_3_wal_replays_and_is_rewritten() {
    let mut bytes = old_header(WAL_VERSION_V3);
    bytes.extend_from_slice(&encode_slot(0));
    bytes.extend_from_slice(&encode_slot(GENERATION_STEP));
    let mut payload = 1u32.to_le_bytes().to_vec();
    payload.push(ENTRY_TAG_EVENT);
    payload.extend_from_slice(&4u64.to_le_bytes());
    payload.extend_from_slice(&7u64.to_le_bytes());
    payload.extend_from_slice(&3u32.to_le_bytes());
    payload.extend_from_slice(b"xyz");
    let frame_start = bytes.len();
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut covered = GENERATION_STEP.to_le_bytes().to_vec();
    covered.extend_from_slice(&payload);
    bytes.extend_from_slice(&crc32fast::hash(&covered).to_le_bytes());
    bytes.extend_from_slice(&covered);
    let one_frame = bytes.clone();
    check_old_wal_is_rewritten(&one_frame, WAL_VERSION_V3, vec![event(4, 7, b"xyz")]);

    let second_start = bytes.len();
    bytes.extend_from_slice(&one_frame[frame_start..]);
    bytes[second_start - 1] ^= 1;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.wal");
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(Wal::open(&path), Err(StoreError::Corrupt { .. })));
}
