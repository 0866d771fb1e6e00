//! Sealed exports: a sidecar `<file>.seal` that keeps an exported log tamper-evident.
//!
//! dsh readers refuse any row they do not know (spec 3.4: no other key; strict decoding
//! errors on a malformed row), and the header admits no extra key (spec 3.3), so no line of
//! our own can ride inside the log where dsh ignores it. The seal is therefore a sidecar file
//! beside the export, one JSON line (docs/format.md, "Sealed export"):
//!
//! ```text
//! {"type":"sessionlog/seal","version":2,"session":ID,"events":N,"chainHead":HEX64,"fileBytes":N,"fileBlake3":HEX64}
//! ```
//!
//! `chainHead` is the store's blake3 chain hash after the last event (the same value
//! `verify` prints as `head`), recomputed from the file's own events; `fileBlake3` covers every
//! byte of the file, so a change that leaves the parsed events equal (whitespace, key order)
//! is caught too. [`verify_sealed`] reads the file strictly, recomputes both, and compares.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sessionlog_format::record::{self, BodyEncoding, ChainHash};
use sessionlog_format::{ReadOptions, Recovery, SnapshotMode};

use crate::error::Error;
use crate::files::open_log;
use crate::log_store::LogStore;
use crate::publish::publish_file;

/// The seal's `type` value.
pub const SEAL_TYPE: &str = "sessionlog/seal";
/// The seal format version this build writes: `chainHead` over plain records, as store
/// version 2 keeps them.
pub const SEAL_VERSION: u64 = 2;
/// The first seal version, still read: `chainHead` over records whose bodies of 4 KiB or more
/// were compressed, as store version 1 kept them.
pub const SEAL_VERSION_COMPRESSED_BODIES: u64 = 1;
/// Largest seal file read; a seal is one short line.
pub const SEAL_BYTES_MAX: u64 = 64 << 10;

/// What a seal records about its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seal {
    /// [`SEAL_VERSION`], or [`SEAL_VERSION_COMPRESSED_BODIES`] for a seal of an older build.
    pub version: u64,
    pub session: String,
    pub events: u64,
    pub chain_head: ChainHash,
    pub file_bytes: u64,
    pub file_blake3: [u8; 32],
}

/// What was recomputed from a log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDigest {
    pub session: String,
    pub events: u64,
    pub chain_head: ChainHash,
    pub file_bytes: u64,
    pub file_blake3: [u8; 32],
}

/// The verdict of [`verify_sealed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealReport {
    pub file: PathBuf,
    /// The digest of the file, when it read cleanly.
    pub digest: Option<FileDigest>,
    /// Located problems, each `FILE[:LINE]: message`; empty when the seal holds.
    pub faults: Vec<String>,
}

impl SealReport {
    pub fn ok(&self) -> bool {
        self.faults.is_empty()
    }
}

/// The sidecar path of `file`: its name with `.seal` appended.
pub fn seal_path(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".seal");
    file.with_file_name(name)
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex32(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (idx, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[idx * 2..idx * 2 + 2], 16).ok()?;
    }
    Some(out)
}

impl Seal {
    /// The seal's one line, newline-terminated.
    pub fn to_line(&self) -> String {
        let value = json!({
            "type": SEAL_TYPE,
            "version": self.version,
            "session": self.session,
            "events": self.events,
            "chainHead": to_hex(&self.chain_head),
            "fileBytes": self.file_bytes,
            "fileBlake3": to_hex(&self.file_blake3),
        });
        format!("{value}\n")
    }

    /// Parses a seal line; the error says which field is wrong.
    pub fn parse(text: &str) -> Result<Seal, String> {
        let value: Value =
            serde_json::from_str(text.trim_end()).map_err(|e| format!("not JSON: {e}"))?;
        let object = value.as_object().ok_or("not a JSON object")?;
        let allowed = [
            "type",
            "version",
            "session",
            "events",
            "chainHead",
            "fileBytes",
            "fileBlake3",
        ];
        if let Some(key) = object.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(format!("unknown key {key:?}"));
        }
        if object.get("type").and_then(Value::as_str) != Some(SEAL_TYPE) {
            return Err(format!("type is not {SEAL_TYPE:?}"));
        }
        let version = match object.get("version").and_then(Value::as_u64) {
            Some(v @ (SEAL_VERSION_COMPRESSED_BODIES | SEAL_VERSION)) => v,
            Some(v) => {
                return Err(format!(
                    "seal version {v}; this build reads {SEAL_VERSION_COMPRESSED_BODIES} and \
                     {SEAL_VERSION}"
                ))
            }
            None => return Err("version is not an integer".to_owned()),
        };
        let text_field = |key: &str| {
            object
                .get(key)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{key} is not a string"))
        };
        let int_field = |key: &str| {
            object
                .get(key)
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("{key} is not a non-negative integer"))
        };
        let hash_field = |key: &str| {
            text_field(key)
                .and_then(|t| from_hex32(t).ok_or_else(|| format!("{key} is not 64 hex digits")))
        };
        Ok(Seal {
            version,
            session: text_field("session")?.to_owned(),
            events: int_field("events")?,
            chain_head: hash_field("chainHead")?,
            file_bytes: int_field("fileBytes")?,
            file_blake3: hash_field("fileBlake3")?,
        })
    }
}

/// The byte length and blake3 of a whole file.
fn hash_file(path: &Path) -> Result<(u64, [u8; 32]), Error> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut n_bytes = 0u64;
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                n_bytes += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Ok((n_bytes, *hasher.finalize().as_bytes()))
}

/// Reads `path` strictly (every rule, no recovery) and recomputes the store's chain over its
/// events.
pub fn digest_file(path: &Path) -> Result<FileDigest, Error> {
    digest_file_as(path, SEAL_VERSION)
}

/// The record encoding whose chain a seal of `version` pins.
fn body_encoding(version: u64) -> BodyEncoding {
    match version {
        SEAL_VERSION_COMPRESSED_BODIES => BodyEncoding::CompressLarge,
        _ => BodyEncoding::Plain,
    }
}

/// [`digest_file`] with the chain a seal of `version` pins.
fn digest_file_as(path: &Path, version: u64) -> Result<FileDigest, Error> {
    let options = ReadOptions {
        recovery: Recovery::Strict,
        snapshot: SnapshotMode::Auto,
    };
    let mut reader = open_log(path, options)?;
    let session = reader.header().id.clone();
    let mut chain = record::genesis_chain(reader.header());
    let mut events = 0u64;
    let mut scratch = Vec::new();
    while let Some(event) = reader.next_event() {
        let event = event.map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        scratch.clear();
        chain = record::encode_event_with(&event, &chain, &mut scratch, body_encoding(version))
            .map_err(|e| Error::Refused(format!("{}: seq {}: {e}", path.display(), event.seq)))?;
        events += 1;
    }
    drop(reader);
    let (file_bytes, file_blake3) = hash_file(path)?;
    Ok(FileDigest {
        session,
        events,
        chain_head: chain,
        file_bytes,
        file_blake3,
    })
}

/// Seals an exported `file` of `session`: recomputes its digest, checks it against the store
/// when the store's head is still at the export's end, and publishes `<file>.seal` without
/// overwriting. Returns the seal.
pub fn seal_export(store: &dyn LogStore, session: &str, file: &Path) -> Result<Seal, Error> {
    let digest = digest_file(file)?;
    if digest.session != session {
        return Err(Error::Refused(format!(
            "{}: holds session {}, not {session}",
            file.display(),
            digest.session
        )));
    }
    let head = store.head(session)?;
    if head.next_seq == digest.events && head.chain != digest.chain_head {
        return Err(Error::Refused(format!(
            "{}: the exported events do not hash to the store's chain head",
            file.display()
        )));
    }
    let seal = Seal {
        version: SEAL_VERSION,
        session: digest.session,
        events: digest.events,
        chain_head: digest.chain_head,
        file_bytes: digest.file_bytes,
        file_blake3: digest.file_blake3,
    };
    write_new(&seal_path(file), seal.to_line().as_bytes())?;
    Ok(seal)
}

/// Writes a new file safely (see [`crate::publish`]).
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    if path.exists() {
        return Err(Error::Refused(format!(
            "{}: exists; a seal is never overwritten",
            path.display()
        )));
    }
    publish_file(path, "tmp", |temp| {
        let mut file = File::options()
            .write(true)
            .create_new(true)
            .open(temp)
            .map_err(|e| Error::io(temp, e))?;
        file.write_all(bytes).map_err(|e| Error::io(temp, e))
    })
}

/// Verifies `file` against its `<file>.seal`: the file must read strictly, and its events,
/// chain head, byte length and blake3 must equal the seal's. A missing seal is a fault: a
/// stripped seal must not pass for an intact one.
pub fn verify_sealed(file: &Path) -> SealReport {
    let mut report = SealReport {
        file: file.to_owned(),
        digest: None,
        faults: Vec::new(),
    };
    let seal_file = seal_path(file);
    let seal = match read_seal(&seal_file) {
        Ok(seal) => Some(seal),
        Err(message) => {
            report.faults.push(message);
            None
        }
    };
    let version = seal.as_ref().map_or(SEAL_VERSION, |s| s.version);
    let digest = match digest_file_as(file, version) {
        Ok(digest) => digest,
        Err(error) => {
            report.faults.push(format!("{error}"));
            return report;
        }
    };
    if let Some(seal) = seal {
        let place = seal_file.display();
        let mut check = |what: &str, same: bool, sealed: String, found: String| {
            if !same {
                report.faults.push(format!(
                    "{place}: {what}: sealed {sealed}, file has {found}"
                ));
            }
        };
        check(
            "session",
            seal.session == digest.session,
            seal.session.clone(),
            digest.session.clone(),
        );
        check(
            "events",
            seal.events == digest.events,
            seal.events.to_string(),
            digest.events.to_string(),
        );
        check(
            "chainHead",
            seal.chain_head == digest.chain_head,
            to_hex(&seal.chain_head),
            to_hex(&digest.chain_head),
        );
        check(
            "fileBytes",
            seal.file_bytes == digest.file_bytes,
            seal.file_bytes.to_string(),
            digest.file_bytes.to_string(),
        );
        check(
            "fileBlake3",
            seal.file_blake3 == digest.file_blake3,
            to_hex(&seal.file_blake3),
            to_hex(&digest.file_blake3),
        );
    }
    report.digest = Some(digest);
    report
}

fn read_seal(path: &Path) -> Result<Seal, String> {
    let file = File::open(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => format!("{}: no seal (the file is not sealed)", path.display()),
        _ => format!("{}: {e}", path.display()),
    })?;
    let mut bytes = Vec::new();
    file.take(SEAL_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() as u64 > SEAL_BYTES_MAX {
        return Err(format!(
            "{}: over {SEAL_BYTES_MAX} bytes; not a seal",
            path.display()
        ));
    }
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| format!("{}:1: not UTF-8; not a seal", path.display()))?;
    if text.lines().count() != 1 {
        return Err(format!("{}: a seal is exactly one line", path.display()));
    }
    Seal::parse(text).map_err(|reason| format!("{}:1: invalid seal: {reason}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a seal line survives a round trip, and every damaged field is named.
    // Method: print a seal, parse it back; then parse edited lines.
    #[test]
    fn seal_line_round_trips_and_names_bad_fields() {
        let seal = Seal {
            version: SEAL_VERSION,
            session: "s".to_owned(),
            events: 7,
            chain_head: [0xab; 32],
            file_bytes: 99,
            file_blake3: [0x01; 32],
        };
        let line = seal.to_line();
        assert_eq!(Seal::parse(&line), Ok(seal));
        let bad = line.replace("\"events\":7", "\"events\":-1");
        assert!(Seal::parse(&bad).unwrap_err().contains("events"));
        let bad = line.replace(&"ab".repeat(32), "zz");
        assert!(Seal::parse(&bad).unwrap_err().contains("chainHead"));
        let old = line.replace("\"version\":2", "\"version\":1");
        assert_eq!(Seal::parse(&old).map(|s| s.version), Ok(1));
        let bad = line.replace("\"version\":2", "\"version\":3");
        assert!(Seal::parse(&bad).unwrap_err().contains("version 3"));
        assert!(Seal::parse("[]").is_err());
        assert!(Seal::parse("{\"type\":\"x\"}").is_err());
    }

    // Goal: a version 1 seal, whose chain covers compressed large bodies, still verifies, and
    // only against that chain; a version 2 seal pins the plain records the store keeps.
    // Method: write a generated log with bodies over 4 KiB, digest it both ways, seal it as
    // each version and verify; then give the version 1 seal the plain chain.
    #[test]
    fn version_1_seals_verify_against_the_compressed_chain() {
        use sessionlog_format::gen::{GenOptions, Generator};
        use sessionlog_format::{Compression, LogWriter};
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.v3.jsonl");
        let mut generator = Generator::new(GenOptions {
            events: 400,
            seed: 3,
        });
        let out = File::create(&file).unwrap();
        let mut writer = LogWriter::new(out, &generator.header(), Compression::None).unwrap();
        while let Some(batch) = generator.next_batch() {
            writer.append_batch(&batch).unwrap();
        }
        writer.into_inner().unwrap().sync_all().unwrap();
        let plain = digest_file(&file).unwrap();
        let compressed = digest_file_as(&file, SEAL_VERSION_COMPRESSED_BODIES).unwrap();
        assert_ne!(plain.chain_head, compressed.chain_head);
        assert_eq!(
            (plain.events, plain.file_blake3),
            (compressed.events, compressed.file_blake3)
        );
        let seal_of = |version: u64, digest: &FileDigest| Seal {
            version,
            session: digest.session.clone(),
            events: digest.events,
            chain_head: digest.chain_head,
            file_bytes: digest.file_bytes,
            file_blake3: digest.file_blake3,
        };
        let cases = [
            (seal_of(SEAL_VERSION_COMPRESSED_BODIES, &compressed), true),
            (seal_of(SEAL_VERSION, &plain), true),
            (seal_of(SEAL_VERSION_COMPRESSED_BODIES, &plain), false),
            (seal_of(SEAL_VERSION, &compressed), false),
        ];
        for (seal, holds) in cases {
            std::fs::write(seal_path(&file), seal.to_line()).unwrap();
            let report = verify_sealed(&file);
            assert_eq!(report.ok(), holds, "{seal:?}: {:?}", report.faults);
            if !holds {
                assert!(
                    report.faults[0].contains("chainHead"),
                    "{:?}",
                    report.faults
                );
            }
        }
    }
}
