//! .jsonl.zstd framing: one checksummed zstd frame per append batch (spec 3.2).
//!
//! A `.jsonl.zstd` file is a plain concatenation of independent zstd frames
//! (RFC 8878), each written at level [`FRAME_LEVEL`] with the content checksum
//! flag on and the content size recorded. Frame 0 holds exactly the header
//! line; every later frame holds one durable append batch of complete,
//! newline-terminated JSON lines.
//!
//! [`FrameWriter`] writes one frame per call. [`FrameReader`] walks every frame
//! (a generic one-shot decoder may stop after the first one) and tells three
//! endings apart:
//!
//! - end of input exactly at a frame boundary: a clean end;
//! - end of input inside the final frame: a recoverable torn tail, reported by
//!   [`FrameReader::torn`], after every byte that frame's complete blocks
//!   decoded to has been returned (the line layer above keeps only complete
//!   lines);
//! - a checksum, decompression or structure failure, or anything other than a
//!   frame where a frame should start (zero-filled or garbage tails included):
//!   corruption, reported as an [`io::ErrorKind::InvalidData`] error whose inner
//!   error is a [`FrameCorruption`] naming the frame and its byte offset.
//!
//! Reader policy choices:
//!
//! - Every zstd frame must set the content checksum flag; a frame whose header
//!   lacks it is corruption (this also catches a flipped flag bit, which would
//!   otherwise shift the frame end by the four checksum bytes).
//! - Skippable frames (magic `0x184D2A50..=0x184D2A5F`) are skipped: they yield
//!   no content but count as frames for indices, offsets and
//!   [`FrameReader::frames_completed`].
//! - The content of a frame is held back until the frame's checksum has been
//!   verified, so a corrupt frame never leaks its (possibly wrong) bytes. To
//!   keep memory bounded, a frame whose content grows beyond 32 MiB (far beyond
//!   any append batch) streams the rest unverified: its content is returned as
//!   it is decoded and a checksum failure is reported after it.
//! - A frame may decompress to at most [`FRAME_CONTENT_BYTES_MAX`]; a larger one
//!   (a zstd bomb) is corruption, reported once the limit is passed, so the
//!   work one frame can cause is bounded whatever its lines look like.

use std::io::{self, Read, Write};

use zstd::bulk::Compressor;
use zstd::stream::raw::{CParameter, Decoder, InBuffer, Operation, OutBuffer};

/// The four magic bytes that start every zstd frame.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
/// Compression level of written frames (zstd's default).
pub const FRAME_LEVEL: i32 = 3;

/// Compressed bytes read from the inner reader at a time.
const INPUT_CHUNK: usize = 128 * 1024;
/// Spare room offered to the decoder per step (one maximal zstd block).
const OUTPUT_CHUNK: usize = 128 * 1024;
/// Output buffer capacity kept between frames.
const RETAINED_OUTPUT_BYTES: usize = 8 * OUTPUT_CHUNK;
/// Content of one frame held back for checksum verification before streaming.
const MAX_HELD_FRAME_BYTES: usize = 32 * 1024 * 1024;
/// Most bytes one frame may decompress to: 16 times the largest row, far beyond any append
/// batch a writer makes. A larger frame is corrupt (a zstd bomb).
pub const FRAME_CONTENT_BYTES_MAX: u64 = 1 << 30;
/// Magic number plus Frame_Header_Descriptor: the bytes checked at a frame start.
const FRAME_PREFIX_LEN: usize = 5;
/// Content_Checksum_flag of the Frame_Header_Descriptor (RFC 8878  3.1.1.1.1).
const FHD_CHECKSUM_FLAG: u8 = 1 << 2;

/// True when `prefix` starts with the zstd frame magic.
pub fn is_zstd(prefix: &[u8]) -> bool {
    prefix.starts_with(&ZSTD_MAGIC)
}

/// True when `bytes` (at most four) is a prefix of a skippable-frame magic
/// number, `0x184D2A5?` little-endian.
fn is_skippable_magic_prefix(bytes: &[u8]) -> bool {
    const TAIL: [u8; 3] = [0x2A, 0x4D, 0x18];
    match bytes.split_first() {
        None => true,
        Some((first, rest)) => first & 0xF0 == 0x50 && TAIL.starts_with(rest),
    }
}

/// Checks the first bytes (1 to [`FRAME_PREFIX_LEN`]) of a frame: they must
/// begin a zstd frame with the checksum flag set, or a skippable frame.
fn check_frame_prefix(prefix: &[u8]) -> Result<(), String> {
    let magic = &prefix[..prefix.len().min(ZSTD_MAGIC.len())];
    if ZSTD_MAGIC.starts_with(magic) {
        match prefix.get(ZSTD_MAGIC.len()) {
            Some(descriptor) if descriptor & FHD_CHECKSUM_FLAG == 0 => Err(format!(
                "frame header descriptor {descriptor:#04x} lacks the content checksum flag"
            )),
            _ => Ok(()),
        }
    } else if is_skippable_magic_prefix(magic) {
        Ok(())
    } else {
        let found: Vec<String> = magic.iter().map(|b| format!("{b:02x}")).collect();
        Err(format!(
            "expected zstd frame magic 28 b5 2f fd, found {}",
            found.join(" ")
        ))
    }
}

fn new_frame_compressor() -> io::Result<Compressor<'static>> {
    let mut compressor = Compressor::new(FRAME_LEVEL)?;
    compressor.set_parameter(CParameter::ChecksumFlag(true))?;
    compressor.set_parameter(CParameter::ContentSizeFlag(true))?;
    Ok(compressor)
}

/// Writes one independent, checksummed zstd frame per call.
pub struct FrameWriter<W: Write> {
    inner: W,
    /// Created on the first frame, so that `new` cannot fail.
    compressor: Option<Compressor<'static>>,
}

impl<W: Write> FrameWriter<W> {
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            compressor: None,
        }
    }

    /// Compresses `batch` into exactly one frame (checksum flag on, content size recorded) and writes it. Returns the compressed size in bytes. An empty batch still writes a (valid, empty) frame.
    ///
    /// The frame is compressed in memory first and handed to the inner writer
    /// with a single `write_all`; an error from the inner writer may leave a
    /// partial frame behind it (a torn tail for a reader).
    pub fn write_frame(&mut self, batch: &[u8]) -> io::Result<u64> {
        let compressor = match &mut self.compressor {
            Some(compressor) => compressor,
            empty => empty.insert(new_frame_compressor()?),
        };
        // One-shot compression of a known-size input: exactly one frame, with
        // the content size in its header.
        let frame = compressor.compress(batch)?;
        self.inner.write_all(&frame)?;
        Ok(frame.len() as u64)
    }

    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    pub fn into_inner(self) -> W {
        self.inner
    }
}

/// Where a read that ended inside the final frame stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornFrame {
    pub frame_index: u64,
    pub frame_offset_bytes: u64,
}

/// A corrupt complete frame (or garbage where a frame should start).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("zstd frame {frame_index} at byte offset {frame_offset_bytes} is corrupt: {reason}")]
pub struct FrameCorruption {
    pub frame_index: u64,
    pub frame_offset_bytes: u64,
    pub reason: String,
}

enum ReadState {
    Decoding,
    Finished,
    Corrupt(FrameCorruption),
}

/// Decompresses every frame in turn and yields the concatenated content through `Read`.
/// - EOF exactly at a frame boundary: clean end (`torn()` is None).
/// - EOF inside a frame: returns all content decoded so far, then Ok(0); `torn()` reports the frame.
/// - A corrupt frame (bad checksum, bad data, bad magic where a frame should start, including zero-filled or garbage tails): returns io::Error of kind InvalidData whose inner error is a FrameCorruption; content decoded before the corrupt frame was already returned. After an error, further reads keep returning the same error kind.
///
/// Memory is bounded: input is read in 128 KiB chunks through zstd's
/// streaming decoder, and at most one frame's content (up to 32 MiB, see the
/// module docs) is held for checksum verification. Errors of the inner reader
/// are passed through unchanged (`Interrupted` is retried) and leave the
/// reader able to retry.
pub struct FrameReader<R: Read> {
    inner: R,
    /// Created on the first read, so that `new` cannot fail.
    decoder: Option<Decoder<'static>>,
    input: Vec<u8>,
    in_pos: usize,
    in_len: usize,
    /// Compressed offset of `input[0]`.
    input_base: u64,
    /// Also the index of the frame being decoded.
    frames_completed: u64,
    /// Also the offset of the start of the frame being decoded.
    complete_offset: u64,
    /// First bytes of the frame being decoded, checked as they arrive.
    prefix: [u8; FRAME_PREFIX_LEN],
    prefix_len: usize,
    /// Decoded content not yet returned: `pending[served..releasable]` may be
    /// returned, `pending[releasable..]` awaits the frame's checksum.
    pending: Vec<u8>,
    served: usize,
    releasable: usize,
    /// The current frame outgrew `hold_limit` and streams unverified.
    streaming: bool,
    hold_limit: usize,
    /// Content decoded from the current frame, and the most one frame may hold.
    frame_content_bytes: u64,
    content_bytes_max: u64,
    state: ReadState,
    torn: Option<TornFrame>,
}

impl<R: Read> FrameReader<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            decoder: None,
            input: vec![0; INPUT_CHUNK],
            in_pos: 0,
            in_len: 0,
            input_base: 0,
            frames_completed: 0,
            complete_offset: 0,
            prefix: [0; FRAME_PREFIX_LEN],
            prefix_len: 0,
            pending: Vec::new(),
            served: 0,
            releasable: 0,
            streaming: false,
            hold_limit: MAX_HELD_FRAME_BYTES,
            frame_content_bytes: 0,
            content_bytes_max: FRAME_CONTENT_BYTES_MAX,
            state: ReadState::Decoding,
            torn: None,
        }
    }

    /// Lowers the per-frame content limit (tests; the default is
    /// [`FRAME_CONTENT_BYTES_MAX`]).
    pub fn with_content_limit(mut self, content_bytes_max: u64) -> Self {
        assert!(content_bytes_max <= FRAME_CONTENT_BYTES_MAX);
        self.content_bytes_max = content_bytes_max;
        self
    }

    /// The frame that end of input cut short, once a read has reached it.
    pub fn torn(&self) -> Option<TornFrame> {
        self.torn
    }

    /// Number of complete frames decoded so far.
    pub fn frames_completed(&self) -> u64 {
        self.frames_completed
    }

    /// Byte offset (in the compressed input) of the end of the last complete frame.
    pub fn complete_offset_bytes(&self) -> u64 {
        self.complete_offset
    }

    fn in_offset(&self) -> u64 {
        self.input_base + self.in_pos as u64
    }

    fn corrupt(&mut self, reason: String) {
        self.pending.truncate(self.releasable);
        self.state = ReadState::Corrupt(FrameCorruption {
            frame_index: self.frames_completed,
            frame_offset_bytes: self.complete_offset,
            reason,
        });
    }

    /// Records the current frame's first bytes that the input window holds and
    /// checks them. Returns the reason when they cannot start a valid frame.
    fn check_prefix(&mut self) -> Option<String> {
        if self.prefix_len == FRAME_PREFIX_LEN {
            return None;
        }
        let wanted = self.complete_offset + self.prefix_len as u64;
        // The window always starts at or before the wanted byte: a new window
        // is only read once this one is consumed, and every step checks first.
        let start = usize::try_from(wanted.checked_sub(self.input_base)?).ok()?;
        let take = (FRAME_PREFIX_LEN - self.prefix_len).min(self.in_len.saturating_sub(start));
        if take == 0 {
            return None;
        }
        self.prefix[self.prefix_len..self.prefix_len + take]
            .copy_from_slice(&self.input[start..start + take]);
        self.prefix_len += take;
        check_frame_prefix(&self.prefix[..self.prefix_len]).err()
    }

    fn complete_frame(&mut self) -> io::Result<()> {
        self.frames_completed += 1;
        self.complete_offset = self.in_offset();
        self.prefix_len = 0;
        self.releasable = self.pending.len();
        self.streaming = false;
        self.frame_content_bytes = 0;
        if let Some(decoder) = &mut self.decoder {
            decoder.reinit()?;
        }
        Ok(())
    }

    /// Runs the decoder once over the unconsumed input (possibly none, to
    /// flush) and handles the outcome.
    fn run_decoder(&mut self) -> io::Result<()> {
        let decoder = match &mut self.decoder {
            Some(decoder) => decoder,
            empty => empty.insert(Decoder::new()?),
        };
        self.pending.reserve(OUTPUT_CHUNK);
        let mut input = InBuffer::around(&self.input[..self.in_len]);
        input.set_pos(self.in_pos);
        let filled = self.pending.len();
        let mut output = OutBuffer::around_pos(&mut self.pending, filled);
        let result = decoder.run(&mut input, &mut output);
        self.in_pos = input.pos();
        self.frame_content_bytes += (self.pending.len() - filled) as u64;
        if self.frame_content_bytes > self.content_bytes_max {
            let reason = format!(
                "the frame decompresses to more than {} bytes (a zstd bomb?)",
                self.content_bytes_max
            );
            self.corrupt(reason);
            return Ok(());
        }
        match result {
            Err(error) => self.corrupt(error.to_string()),
            Ok(0) => self.complete_frame()?,
            Ok(_) => {
                // A frame too large to hold for verification streams unverified.
                self.streaming |= self.pending.len() >= self.hold_limit;
                if self.streaming {
                    self.releasable = self.pending.len();
                }
            }
        }
        Ok(())
    }

    fn finish_at_eof(&mut self) -> io::Result<()> {
        if self.in_offset() == self.complete_offset {
            self.state = ReadState::Finished;
            return Ok(());
        }
        // Torn: flush whatever complete blocks decoded to that did not fit yet.
        loop {
            let frames = self.frames_completed;
            self.run_decoder()?;
            if !matches!(self.state, ReadState::Decoding) {
                return Ok(());
            }
            if self.frames_completed != frames {
                // The frame was whole after all; the boundary is the end.
                self.state = ReadState::Finished;
                return Ok(());
            }
            if self.pending.len() < self.pending.capacity() {
                break;
            }
        }
        self.torn = Some(TornFrame {
            frame_index: self.frames_completed,
            frame_offset_bytes: self.complete_offset,
        });
        self.releasable = self.pending.len();
        self.state = ReadState::Finished;
        Ok(())
    }

    /// Makes progress: reads input if needed, then decodes some of it.
    fn step(&mut self) -> io::Result<()> {
        if self.in_pos == self.in_len {
            let read = loop {
                match self.inner.read(&mut self.input) {
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    other => break other?,
                }
            };
            self.input_base += self.in_len as u64;
            self.in_pos = 0;
            self.in_len = read;
            if read == 0 {
                return self.finish_at_eof();
            }
        }
        if let Some(reason) = self.check_prefix() {
            self.corrupt(reason);
            return Ok(());
        }
        self.run_decoder()
    }
}

impl<R: Read> Read for FrameReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.served < self.releasable {
                let n = buf.len().min(self.releasable - self.served);
                buf[..n].copy_from_slice(&self.pending[self.served..self.served + n]);
                self.served += n;
                return Ok(n);
            }
            if self.served > 0 && self.served == self.pending.len() {
                self.pending.clear();
                // Do not keep the memory of one unusually large frame.
                self.pending.shrink_to(RETAINED_OUTPUT_BYTES);
                self.served = 0;
                self.releasable = 0;
            }
            match &self.state {
                ReadState::Corrupt(corruption) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        corruption.clone(),
                    ))
                }
                ReadState::Finished => return Ok(0),
                ReadState::Decoding => self.step()?,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &[u8] = b"{\"type\":\"session\",\"version\":3}\n";

    /// Three append batches of complete JSON lines; the first is poorly
    /// compressible, for a frame of about 200 bytes.
    fn batches() -> Vec<Vec<u8>> {
        let words = noisy_lines(150);
        let words = words.split(|b| *b == b'\n').filter(|word| !word.is_empty());
        let mut middle = Vec::new();
        for (i, word) in words.enumerate() {
            middle.extend_from_slice(
                format!(
                    "{{\"type\":\"message\",\"seq\":{i},\"role\":\"assistant\",\"text\":\"{}\"}}\n",
                    String::from_utf8_lossy(word)
                )
                .as_bytes(),
            );
        }
        vec![
            middle,
            b"{\"type\":\"message\",\"seq\":90,\"role\":\"user\",\"text\":\"hello\"}\n".to_vec(),
            b"{\"type\":\"message\",\"seq\":99,\"role\":\"user\",\"text\":\"bye\"}\n{\"type\":\"end\"}\n"
                .to_vec(),
        ]
    }

    /// Writes one frame per batch; returns the file and every frame's start
    /// offset followed by the file length.
    fn write_frames(batches: &[&[u8]]) -> (Vec<u8>, Vec<u64>) {
        let mut writer = FrameWriter::new(Vec::new());
        let mut offsets = vec![0];
        for batch in batches {
            let size = writer.write_frame(batch).unwrap();
            offsets.push(offsets.last().unwrap() + size);
        }
        let file = writer.into_inner();
        assert_eq!(*offsets.last().unwrap(), file.len() as u64);
        (file, offsets)
    }

    /// The standard test file: header frame plus the three batches.
    fn session_file() -> (Vec<u8>, Vec<u64>, Vec<Vec<u8>>) {
        let mut contents = vec![HEADER.to_vec()];
        contents.extend(batches());
        let refs: Vec<&[u8]> = contents.iter().map(Vec::as_slice).collect();
        let (file, offsets) = write_frames(&refs);
        (file, offsets, contents)
    }

    /// An inner reader that hands out at most `step` bytes per read, so that
    /// frames reach the decoder in pieces.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.step).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// Reads `reader` to its end with `chunk`-byte reads; returns the bytes
    /// read and the error that stopped it, if any.
    fn drain<R: Read>(reader: &mut FrameReader<R>, chunk: usize) -> (Vec<u8>, Option<io::Error>) {
        let mut out = Vec::new();
        let mut buf = vec![0; chunk];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => return (out, None),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(error) => return (out, Some(error)),
            }
        }
    }

    fn corruption(error: &io::Error) -> &FrameCorruption {
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
        error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<FrameCorruption>())
            .unwrap_or_else(|| panic!("inner error is not a FrameCorruption: {error:?}"))
    }

    /// Deterministic, poorly compressible text (xorshift), newline-terminated.
    fn noisy_lines(len: usize) -> Vec<u8> {
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut out = Vec::with_capacity(len);
        while out.len() + 1 < len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            out.push(if state % 61 == 7 {
                b'\n'
            } else {
                b'a' + (state % 26) as u8
            });
        }
        out.push(b'\n');
        out
    }

    #[test]
    fn round_trip_header_and_three_batches() {
        // Goal: what FrameWriter writes, FrameReader reads back exactly, frame by
        // frame. Method: write the header line and three batches as four frames,
        // read them back with several read sizes and inner read sizes, compare
        // with the concatenation.
        let (file, offsets, contents) = session_file();
        let expected = contents.concat();
        for (chunk, step) in [(1, usize::MAX), (7, 3), (4096, 1), (4096, usize::MAX)] {
            let mut reader = FrameReader::new(Trickle { data: &file, step });
            let (out, error) = drain(&mut reader, chunk);
            assert!(error.is_none(), "{error:?}");
            assert_eq!(out, expected);
            assert_eq!(reader.frames_completed(), 4);
            assert_eq!(reader.complete_offset_bytes(), offsets[4]);
            assert_eq!(reader.torn(), None);
            // A finished reader stays finished.
            assert_eq!(reader.read(&mut [0; 8]).unwrap(), 0);
        }
    }

    #[test]
    fn round_trip_large_multi_block_frames() {
        // Goal: frames of several zstd blocks, and frames larger than the
        // verification hold limit, round-trip. Method: write two ~400 KiB
        // poorly compressible batches and an empty one; read them back with the
        // default limit and with a 1 KiB limit (streaming mode).
        let big_a = noisy_lines(400 * 1024);
        let big_b = noisy_lines(333 * 1024 + 17);
        let (file, _) = write_frames(&[HEADER, &big_a, b"", &big_b]);
        let expected = [HEADER, &big_a, &big_b].concat();
        for hold_limit in [MAX_HELD_FRAME_BYTES, 1024] {
            let mut reader = FrameReader::new(file.as_slice());
            reader.hold_limit = hold_limit;
            let (out, error) = drain(&mut reader, 1000);
            assert!(error.is_none(), "{error:?}");
            assert!(out == expected, "content differs (hold limit {hold_limit})");
            assert_eq!(reader.frames_completed(), 4);
            assert_eq!(reader.complete_offset_bytes(), file.len() as u64);
            assert_eq!(reader.torn(), None);
        }
    }

    #[test]
    fn golden_frame_bytes_pin_checksum_and_content_size() {
        // Goal: pin the exact bytes of a written frame, so that any change of
        // level, checksum flag or content size flag shows. Method: compress the
        // header line, compare with a hex literal, decode the Frame_Header_Descriptor.
        let mut writer = FrameWriter::new(Vec::new());
        let size = writer.write_frame(HEADER).unwrap();
        let frame = writer.into_inner();
        let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            concat!(
                "28b52ffd", // magic
                "24",       // descriptor: single segment, checksum flag
                "1f",       // content size: 31
                "f90000",   // last raw block of 31 bytes
                "7b2274797065223a2273657373696f6e222c2276657273696f6e223a337d0a",
                "538bf038", // content checksum
            )
        );
        assert_eq!(size, frame.len() as u64);
        assert!(is_zstd(&frame));
        let descriptor = frame[4];
        assert_ne!(
            descriptor & 0b0000_0100,
            0,
            "checksum flag (bit 2) must be set"
        );
        // Single_Segment (bit 5) with FCS_Field_Size flag 0: a 1-byte content size.
        assert_ne!(descriptor & 0b0010_0000, 0);
        assert_eq!(frame[5] as usize, HEADER.len());
        // The empty batch is a valid frame of content size 0.
        let mut writer = FrameWriter::new(Vec::new());
        writer.write_frame(b"").unwrap();
        let empty = writer.into_inner();
        assert_eq!(
            empty,
            [0x28, 0xB5, 0x2F, 0xFD, 0x24, 0x00, 0x01, 0x00, 0x00, 0x99, 0xE9, 0xD8, 0x51]
        );
        assert_eq!(zstd::bulk::decompress(&empty, 16).unwrap(), b"");
    }

    #[test]
    fn reader_walks_every_frame_not_just_the_first() {
        // Goal: regression for readers that stop after the first frame.
        // Method: decode the file as a single-frame decoder would (raw decoder
        // until its first end-of-frame) and see that only the header comes out;
        // FrameReader yields all four frames, agreeing with zstd's own
        // multi-frame decode_all.
        let (file, offsets, contents) = session_file();
        let end0 = offsets[1] as usize;
        assert_eq!(
            zstd::bulk::decompress(&file[..end0], 1 << 20).unwrap(),
            HEADER
        );

        let mut decoder = Decoder::new().unwrap();
        let mut input = InBuffer::around(&file);
        let mut single = Vec::with_capacity(1 << 20);
        let mut output = OutBuffer::around(&mut single);
        while decoder.run(&mut input, &mut output).unwrap() != 0 {}
        assert_eq!(input.pos(), end0);
        assert_eq!(single, HEADER);

        let mut all = Vec::new();
        FrameReader::new(file.as_slice())
            .read_to_end(&mut all)
            .unwrap();
        assert_eq!(all, contents.concat());
        assert_eq!(all, zstd::stream::decode_all(file.as_slice()).unwrap());
        assert!(all.len() > HEADER.len());
    }

    #[test]
    fn torn_tail_at_every_offset_of_the_last_frame() {
        // Goal: end of input inside the final frame is a torn tail, never an
        // error, and loses no complete earlier frame. Method: cut the file at
        // every offset strictly inside the last frame; the output must contain
        // the earlier frames and be a prefix of the full content, and torn()
        // must name frame 3 at its start offset. A cut exactly at the frame
        // start is a clean end.
        let (file, offsets, contents) = session_file();
        let full = contents.concat();
        let before = contents[..3].concat();
        let (start, end) = (offsets[3] as usize, offsets[4] as usize);
        for cut in start + 1..end {
            // Whole input at once, and three bytes per inner read.
            for step in [usize::MAX, 3] {
                let mut reader = FrameReader::new(Trickle {
                    data: &file[..cut],
                    step,
                });
                let (out, error) = drain(&mut reader, 5);
                assert!(error.is_none(), "cut {cut} step {step}: {error:?}");
                assert!(out.starts_with(&before), "cut {cut} step {step}");
                assert!(full.starts_with(&out), "cut {cut} step {step}");
                assert_eq!(
                    reader.torn(),
                    Some(TornFrame {
                        frame_index: 3,
                        frame_offset_bytes: offsets[3]
                    }),
                    "cut {cut} step {step}"
                );
                assert_eq!(reader.frames_completed(), 3);
                assert_eq!(reader.complete_offset_bytes(), offsets[3]);
            }
        }
        let mut reader = FrameReader::new(&file[..start]);
        let (out, error) = drain(&mut reader, 5);
        assert!(error.is_none());
        assert_eq!(out, before);
        assert_eq!(reader.torn(), None);
        assert_eq!(reader.frames_completed(), 3);
    }

    #[test]
    fn torn_tail_keeps_complete_blocks_of_the_last_frame() {
        // Goal: flush semantics: a torn final frame still yields what its
        // complete blocks decode to. Method: the last frame holds ~400 KiB of
        // poorly compressible text (several 128 KiB blocks); cut it near its
        // end and check that more than its first block's worth comes out.
        let big = noisy_lines(400 * 1024);
        let (file, offsets) = write_frames(&[HEADER, &big]);
        let full = [HEADER, &big].concat();
        let cut = offsets[2] as usize - 100;
        let mut reader = FrameReader::new(&file[..cut]);
        let (out, error) = drain(&mut reader, 4096);
        assert!(error.is_none(), "{error:?}");
        assert!(full.starts_with(&out));
        assert!(
            out.len() >= HEADER.len() + 2 * 128 * 1024,
            "got {}",
            out.len()
        );
        assert_eq!(
            reader.torn(),
            Some(TornFrame {
                frame_index: 1,
                frame_offset_bytes: offsets[1]
            })
        );
    }

    #[test]
    fn single_bit_flips_in_a_middle_frame_never_yield_wrong_content() {
        // Goal: a damaged complete frame is reported as corruption of that
        // frame and never silently returns wrong content. Method: flip every
        // bit of every byte of frame 1 (of 4), at most 2000 trials; each read
        // must end in a FrameCorruption naming frame 1 at its offset after
        // exactly frame 0's content, or (when the flip moved the frame end past
        // end of input) in a torn report after a prefix of the true content, or
        // (a bit the decoder ignores) in the exact true content.
        let (file, offsets, contents) = session_file();
        let full = contents.concat();
        let (start, end) = (offsets[1] as usize, offsets[2] as usize);
        let trials = (end - start) * 8;
        assert!(trials <= 2000, "{trials} trials");
        let (mut corrupt, mut torn, mut intact) = (0, 0, 0);
        for position in start..end {
            for bit in 0..8 {
                let mut damaged = file.clone();
                damaged[position] ^= 1 << bit;
                // Whole input at once, and three bytes per inner read so that
                // the decoder meets the frame block by block.
                for step in [usize::MAX, 3] {
                    let mut reader = FrameReader::new(Trickle {
                        data: &damaged,
                        step,
                    });
                    let (out, error) = drain(&mut reader, 64);
                    let at = format!("byte {position} bit {bit} step {step}");
                    match error {
                        Some(error) => {
                            let found = corruption(&error);
                            assert_eq!(found.frame_index, 1, "{at}: {found}");
                            assert_eq!(found.frame_offset_bytes, offsets[1], "{at}");
                            assert_eq!(out, contents[0], "{at}");
                            // The error sticks.
                            let again = reader.read(&mut [0; 16]).unwrap_err();
                            assert_eq!(corruption(&again), found, "{at}");
                            corrupt += 1;
                        }
                        None if reader.torn().is_some() => {
                            assert!(full.starts_with(&out), "{at}");
                            assert_eq!(
                                reader.torn(),
                                Some(TornFrame {
                                    frame_index: 1,
                                    frame_offset_bytes: offsets[1]
                                }),
                                "{at}"
                            );
                            torn += 1;
                        }
                        None => {
                            assert_eq!(out, full, "{at}: wrong content without an error");
                            intact += 1;
                        }
                    }
                }
            }
        }
        eprintln!("{trials} flips: {corrupt} corrupt, {torn} torn, {intact} intact");
        assert!(
            corrupt * 10 >= 2 * trials * 9,
            "{corrupt} of {} reads detected",
            2 * trials
        );
    }

    #[test]
    fn zero_filled_and_garbage_tails_are_corruption() {
        // Goal: bytes after the last frame that cannot start a frame are
        // corruption of the next frame index, reported after all real content.
        // Method: append 64 zero bytes, then a garbage line, then a single zero
        // byte, to a four-frame file.
        let (file, offsets, contents) = session_file();
        let full = contents.concat();
        let tails: [&[u8]; 3] = [&[0; 64], b"garbage that is not a zstd frame\n", &[0]];
        for tail in tails {
            let damaged = [file.as_slice(), tail].concat();
            let mut reader = FrameReader::new(damaged.as_slice());
            let (out, error) = drain(&mut reader, 100);
            let error = error.expect("a bad tail is an error");
            let found = corruption(&error);
            assert_eq!(found.frame_index, 4);
            assert_eq!(found.frame_offset_bytes, offsets[4]);
            assert!(found.reason.contains("magic"), "{found}");
            assert_eq!(out, full);
            assert_eq!(reader.frames_completed(), 4);
            assert_eq!(reader.torn(), None);
            let again = reader.read(&mut [0; 16]).unwrap_err();
            assert_eq!(again.kind(), io::ErrorKind::InvalidData);
        }
    }

    #[test]
    fn frame_without_checksum_flag_is_corruption() {
        // Goal: the format requires the checksum flag, so a frame without it
        // (for instance through a flipped flag bit) is corruption. Method:
        // append a frame compressed without checksum.
        let (file, offsets, contents) = session_file();
        let plain = zstd::bulk::compress(b"{\"type\":\"x\"}\n", 3).unwrap();
        assert_eq!(plain[4] & FHD_CHECKSUM_FLAG, 0);
        let damaged = [file.as_slice(), &plain].concat();
        let mut reader = FrameReader::new(damaged.as_slice());
        let (out, error) = drain(&mut reader, 100);
        let error = error.expect("a frame without checksum is an error");
        let found = corruption(&error);
        assert_eq!(
            (found.frame_index, found.frame_offset_bytes),
            (4, offsets[4])
        );
        assert!(found.reason.contains("checksum"), "{found}");
        assert_eq!(out, contents.concat());
    }

    #[test]
    fn skippable_frames_are_skipped_and_counted() {
        // Goal: document that skippable frames are skipped. Method: put a
        // skippable frame between the header and a batch; content is unchanged
        // and the skippable frame counts as a frame.
        let (header, _) = write_frames(&[HEADER]);
        let (batch, _) = write_frames(&[b"{\"type\":\"x\"}\n"]);
        let skippable = [&[0x5A, 0x2A, 0x4D, 0x18, 3, 0, 0, 0][..], b"abc"].concat();
        let file = [header.as_slice(), &skippable, &batch].concat();
        let mut reader = FrameReader::new(file.as_slice());
        let (out, error) = drain(&mut reader, 100);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(out, [HEADER, b"{\"type\":\"x\"}\n"].concat());
        assert_eq!(reader.frames_completed(), 3);
        assert_eq!(reader.complete_offset_bytes(), file.len() as u64);
    }

    #[test]
    fn empty_input_is_a_clean_empty_end() {
        // Goal: a zero-length file has no frames and is not torn. Method: read
        // an empty slice to its end.
        let mut reader = FrameReader::new(&[][..]);
        let mut out = Vec::new();
        assert_eq!(reader.read_to_end(&mut out).unwrap(), 0);
        assert!(out.is_empty());
        assert_eq!(reader.torn(), None);
        assert_eq!(reader.frames_completed(), 0);
        assert_eq!(reader.complete_offset_bytes(), 0);
    }

    #[test]
    fn is_zstd_checks_the_magic() {
        // Goal: is_zstd recognises frame starts only. Method: a few prefixes.
        assert!(is_zstd(&ZSTD_MAGIC));
        assert!(is_zstd(&[0x28, 0xB5, 0x2F, 0xFD, 0x24]));
        assert!(!is_zstd(&[0x28, 0xB5, 0x2F]));
        assert!(!is_zstd(b"{\"type\":\"session\"}"));
        assert!(!is_zstd(&[]));
    }

    // Goal: a frame that decompresses beyond the content limit (a zstd bomb) is corruption
    // naming the frame, and none of its content is returned; frames within the limit read
    // whole.
    #[test]
    fn frame_content_limit_stops_a_bomb() {
        let bomb = vec![b'\n'; 1 << 20];
        let (file, offsets) = write_frames(&[HEADER, &bomb]);
        assert!(file.len() < 4096, "{} compressed bytes", file.len());
        let mut reader = FrameReader::new(file.as_slice()).with_content_limit(64 << 10);
        let (out, error) = drain(&mut reader, 4096);
        assert_eq!(out, HEADER);
        let error = error.expect("the bomb is refused");
        let corruption = corruption(&error);
        assert_eq!(corruption.frame_index, 1);
        assert_eq!(corruption.frame_offset_bytes, offsets[1]);
        assert!(
            corruption.reason.contains("more than 65536 bytes"),
            "{corruption}"
        );
        let mut reader = FrameReader::new(file.as_slice()).with_content_limit(1 << 20);
        let (out, error) = drain(&mut reader, 4096);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(out.len(), HEADER.len() + bomb.len());
    }
}
