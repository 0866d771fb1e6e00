//! The bounded walk of a dsh session root: which generation files `audit` and `migrate` read,
//! and what they skipped.
//!
//! A path named by the caller is followed wherever it points (a link to a file or to a root is
//! read as what it names). Inside a walk no symbolic link is followed: a link to a directory
//! could lead back to an ancestor (one back-link turned 2 logs into 902 sessions, three made a
//! walk that never ended, and `/proc` holds links to `/`), and a link to a file would read a
//! log twice or one outside the root. A directory met twice (a bind mount of an ancestor) is a
//! cycle, told by its device and inode. Each is skipped and reported, as is a generation name
//! that is not a regular file (a FIFO, which would block, or a device). A directory that cannot
//! be listed is reported too, as a fault: the walk could not look inside it.

use std::collections::HashSet;
use std::fs::{self, FileType, Metadata};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::Error;

/// What a walk found: generation files in path order, each with its path relative to the
/// walked root, and what it did not read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Walk {
    pub files: Vec<(PathBuf, PathBuf)>,
    pub skipped: Vec<Skipped>,
}

impl Walk {
    /// Whether a skip hides something the walk should have read (an unlistable directory).
    pub fn has_fault(&self) -> bool {
        self.skipped.iter().any(|s| s.reason.is_fault())
    }

    fn extend(&mut self, other: Walk) {
        self.files.extend(other.files);
        self.skipped.extend(other.skipped);
    }
}

/// One entry a walk did not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: PathBuf,
    pub reason: SkipReason,
}

/// Why a walk did not read an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// A symbolic link to a directory (not followed inside a walk).
    DirectoryLink,
    /// A symbolic link with a generation name (not followed inside a walk).
    FileLink,
    /// A symbolic link with a generation name whose target does not exist.
    BrokenLink,
    /// A directory already walked (same device and inode).
    Cycle,
    /// A generation name that is not a regular file: `fifo`, `socket`, `character device`,
    /// `block device`.
    NotRegular(&'static str),
    /// A directory that could not be listed, with the I/O error.
    Unreadable(String),
}

impl SkipReason {
    /// A stable one-word name, for `--json`.
    pub fn name(&self) -> &'static str {
        match self {
            SkipReason::DirectoryLink => "directory-link",
            SkipReason::FileLink => "file-link",
            SkipReason::BrokenLink => "broken-link",
            SkipReason::Cycle => "cycle",
            SkipReason::NotRegular(_) => "not-regular",
            SkipReason::Unreadable(_) => "unreadable",
        }
    }

    /// Whether the skip hides part of the tree: the directory could not be listed.
    pub fn is_fault(&self) -> bool {
        matches!(self, SkipReason::Unreadable(_))
    }
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipReason::DirectoryLink => {
                f.write_str("a symbolic link to a directory, not followed")
            }
            SkipReason::FileLink => f.write_str(
                "a symbolic link, not followed inside a walk (name the file to read it)",
            ),
            SkipReason::BrokenLink => f.write_str("a symbolic link to nothing"),
            SkipReason::Cycle => f.write_str("a directory already walked (same device and inode)"),
            SkipReason::NotRegular(kind) => write!(f, "a {kind}, not a regular file"),
            SkipReason::Unreadable(error) => write!(f, "cannot list the directory: {error}"),
        }
    }
}

/// The session logs under `path`: the path itself when it is not a directory, or every
/// generation file of the tree (sorted). The root itself must be listable.
pub fn walk(path: &Path) -> Result<Walk, Error> {
    // A named path is followed: `metadata`, not `symlink_metadata`.
    let metadata = fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if !metadata.is_dir() {
        let name = path.file_name().map(PathBuf::from).unwrap_or_default();
        return Ok(Walk {
            files: vec![(path.to_owned(), name)],
            skipped: Vec::new(),
        });
    }
    let mut walker = Walker {
        root: path,
        seen: HashSet::new(),
        pending: Vec::new(),
        found: Walk::default(),
    };
    walker.seen.insert((metadata.dev(), metadata.ino()));
    let entries = fs::read_dir(path).map_err(|e| Error::io(path, e))?;
    walker.entries(path, entries);
    // Depth first with an explicit stack: a deep tree costs no stack and holds one open
    // directory at a time.
    while let Some(dir) = walker.pending.pop() {
        match fs::read_dir(&dir) {
            Ok(entries) => walker.entries(&dir, entries),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => walker.skip(dir, SkipReason::Unreadable(error.to_string())),
        }
    }
    walker.found.files.sort();
    walker.found.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(walker.found)
}

/// [`walk`] over several paths, in the order given.
pub fn walk_all<P: AsRef<Path>>(paths: &[P]) -> Result<Walk, Error> {
    let mut all = Walk::default();
    for path in paths {
        all.extend(walk(path.as_ref())?);
    }
    Ok(all)
}

struct Walker<'a> {
    root: &'a Path,
    /// Every directory walked, by device and inode.
    seen: HashSet<(u64, u64)>,
    /// Directories found and not yet listed.
    pending: Vec<PathBuf>,
    found: Walk,
}

impl Walker<'_> {
    fn skip(&mut self, path: PathBuf, reason: SkipReason) {
        self.found.skipped.push(Skipped { path, reason });
    }

    fn entries(&mut self, dir: &Path, entries: fs::ReadDir) {
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(error) => {
                    self.skip(dir.to_owned(), SkipReason::Unreadable(error.to_string()));
                    return;
                }
            };
            let path = entry.path();
            // `symlink_metadata`: the entry itself, never what a link points to.
            match fs::symlink_metadata(&path) {
                Ok(metadata) => self.entry(path, &metadata),
                // Gone since the listing (a process leaving `/proc`): nothing to read.
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) if is_generation(&path) => {
                    self.skip(path, SkipReason::Unreadable(error.to_string()))
                }
                Err(_) => {}
            }
        }
    }

    fn entry(&mut self, path: PathBuf, metadata: &Metadata) {
        let file_type = metadata.file_type();
        if file_type.is_dir() {
            if !self.seen.insert((metadata.dev(), metadata.ino())) {
                self.skip(path, SkipReason::Cycle);
                return;
            }
            self.pending.push(path);
        } else if file_type.is_symlink() {
            match fs::metadata(&path) {
                Ok(target) if target.is_dir() => self.skip(path, SkipReason::DirectoryLink),
                Ok(_) if is_generation(&path) => self.skip(path, SkipReason::FileLink),
                Err(_) if is_generation(&path) => self.skip(path, SkipReason::BrokenLink),
                _ => {}
            }
        } else if is_generation(&path) {
            match special_kind(file_type) {
                Some(kind) => self.skip(path, SkipReason::NotRegular(kind)),
                None => {
                    let relative = path.strip_prefix(self.root).unwrap_or(&path).to_owned();
                    self.found.files.push((path, relative));
                }
            }
        }
    }
}

fn is_generation(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(is_generation_name)
}

/// The name of a file type that is neither a regular file, a directory nor a link.
pub(crate) fn special_kind(file_type: FileType) -> Option<&'static str> {
    if file_type.is_fifo() {
        Some("fifo")
    } else if file_type.is_socket() {
        Some("socket")
    } else if file_type.is_char_device() {
        Some("character device")
    } else if file_type.is_block_device() {
        Some("block device")
    } else {
        None
    }
}

/// Whether `name` is a session log generation name (spec 3.1 rule 1).
pub fn is_generation_name(name: &str) -> bool {
    let base = name.strip_suffix(".zstd").unwrap_or(name);
    base == "session.jsonl" || named_generation(name).is_some()
}

/// The generation a canonical `session.v<N>.jsonl[.zstd]` name identifies (dsh-v4.md 7: dsh
/// refuses a file whose header names another); `None` for any other name, `session.jsonl`
/// included.
pub fn named_generation(name: &str) -> Option<u64> {
    let base = name.strip_suffix(".zstd").unwrap_or(name);
    let number = base
        .strip_prefix("session.v")
        .and_then(|r| r.strip_suffix(".jsonl"))?;
    let canonical = !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit())
        && !number.starts_with('0');
    canonical.then(|| number.parse().ok()).flatten()
}
