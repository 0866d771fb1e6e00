//! The one way a new file is published: written under a temporary name beside its target,
//! synced, linked into place without overwriting, and the directory synced, so that a crash
//! never leaves a partial file under the target's name and an existing file is never
//! replaced. Exports, seals, migrated successors, backups and new store files all go
//! through [`publish_new`].

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// An I/O failure while publishing, naming the file it happened to.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct PublishError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

impl PublishError {
    fn new(path: &Path, source: io::Error) -> PublishError {
        PublishError {
            path: path.to_owned(),
            source,
        }
    }

    /// The target already existed: nothing was published.
    pub fn is_exists(&self) -> bool {
        self.source.kind() == io::ErrorKind::AlreadyExists
    }
}

impl From<PublishError> for crate::Error {
    fn from(error: PublishError) -> crate::Error {
        crate::Error::io(&error.path, error.source)
    }
}

/// The temporary name of `target`'s file while `purpose` writes it: hidden, beside it (on
/// the same file system, so the link is a rename-free publish), unique to this process.
fn temp_path(target: &Path, purpose: &str) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.{purpose}-{}", std::process::id()))
}

/// Publishes the file `write` makes at the temporary path it is given (it creates the file;
/// a stale one left by an earlier crash of this pid is removed first). Its result decides:
/// `Ok(Ok(value))` publishes, `Ok(Err(refusal))` publishes nothing and returns the refusal,
/// `Err` publishes nothing. The temporary file is removed in every case. A target that
/// already exists is an error for which [`PublishError::is_exists`] holds.
pub fn publish_new<T, R, E>(
    target: &Path,
    purpose: &str,
    write: impl FnOnce(&Path) -> Result<Result<T, R>, E>,
) -> Result<Result<T, R>, E>
where
    E: From<PublishError>,
{
    let temp = temp_path(target, purpose);
    match std::fs::remove_file(&temp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(PublishError::new(&temp, e).into()),
    }
    let published = write(&temp).and_then(|written| match written {
        Ok(value) => {
            link_synced(&temp, target)?;
            Ok(Ok(value))
        }
        Err(refusal) => Ok(Err(refusal)),
    });
    let removed = match std::fs::remove_file(&temp) {
        Ok(()) => Ok(()),
        // `write` failed before it created the file.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(PublishError::new(&temp, e)),
    };
    let published = published?;
    removed?;
    Ok(published)
}

/// [`publish_new`] for a write that never refuses.
pub fn publish_file<T, E>(
    target: &Path,
    purpose: &str,
    write: impl FnOnce(&Path) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<PublishError>,
{
    let published = publish_new(target, purpose, |temp| {
        write(temp).map(Ok::<T, std::convert::Infallible>)
    })?;
    match published {
        Ok(value) => Ok(value),
        Err(never) => match never {},
    }
}

/// Syncs `temp`'s data, links it to `target` (never overwriting) and syncs the directory.
fn link_synced(temp: &Path, target: &Path) -> Result<(), PublishError> {
    File::open(temp)
        .and_then(|file| file.sync_all())
        .map_err(|e| PublishError::new(temp, e))?;
    std::fs::hard_link(temp, target).map_err(|e| PublishError::new(target, e))?;
    sync_parent(target)
}

/// Syncs the directory holding `path`, so that a new name in it is durable.
pub fn sync_parent(path: &Path) -> Result<(), PublishError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| PublishError::new(parent, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_text(text: &'static str) -> impl FnOnce(&Path) -> Result<(), PublishError> {
        move |temp| std::fs::write(temp, text).map_err(|e| PublishError::new(temp, e))
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    // Goal: a published file holds what was written, and no temporary file is left; an
    // existing target is never replaced. Method: publish twice to one name.
    #[test]
    fn publishes_once_and_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.jsonl");
        publish_file(&target, "tmp", write_text("first")).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "first");
        let second = publish_file(&target, "tmp", write_text("second")).unwrap_err();
        assert!(second.is_exists(), "{second}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "first");
        assert_eq!(names(dir.path()), vec!["out.jsonl".to_owned()]);
    }

    // Goal: a refusal or a failing write publishes nothing and leaves no temporary file.
    // Method: a write that refuses after writing, one that fails after writing.
    #[test]
    fn a_refused_or_failed_write_publishes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.jsonl");
        let refused = publish_new(&target, "tmp", |temp| {
            std::fs::write(temp, "partial").map_err(|e| PublishError::new(temp, e))?;
            Ok::<Result<(), &str>, PublishError>(Err("refused"))
        })
        .unwrap();
        assert_eq!(refused, Err("refused"));
        let failed = publish_file(&target, "tmp", |temp| {
            std::fs::write(temp, "partial").map_err(|e| PublishError::new(temp, e))?;
            Err::<(), _>(PublishError::new(temp, io::Error::other("disk full")))
        });
        assert!(failed.is_err());
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    }

    // Goal: a temporary file left by an earlier crash of the same pid does not block the next
    // publish. Method: leave one, publish.
    #[test]
    fn a_stale_temporary_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.jsonl");
        std::fs::write(temp_path(&target, "tmp"), "stale").unwrap();
        publish_file(&target, "tmp", |temp| {
            std::fs::File::options()
                .write(true)
                .create_new(true)
                .open(temp)
                .and_then(|mut f| std::io::Write::write_all(&mut f, b"fresh"))
                .map_err(|e| PublishError::new(temp, e))
        })
        .unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "fresh");
    }
}
