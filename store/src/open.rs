//! `open_store`: the one opener of every backend, by location.
//!
//! A location is a `postgres://` (or `postgresql://`) URL, or a path to a redb file. Any other
//! `scheme://` is refused, so that a mistyped URL never becomes a file name. A read opens
//! what exists and never creates anything: a missing redb file or a database without the
//! sessionlog schema is [`StoreError::Missing`]. A write may create the store, but only where
//! the caller said: the parent directory of the file must exist (except for the default
//! path, whose directories are the tool's own and are created).

use std::path::Path;
use std::sync::Arc;

use crate::embedded::{Store, StoreError};
pub use crate::location::{redact_url, Access, Location};
use crate::log_store::LogStore;
#[cfg(feature = "postgres")]
use crate::pg_store::PgStore;

/// Opens the store at `location`.
pub fn open_store(location: &Location, access: Access) -> Result<Arc<dyn LogStore>, StoreError> {
    Ok(match (location, access) {
        #[cfg(feature = "postgres")]
        (Location::Postgres(url), Access::Read) => Arc::new(PgStore::connect_read_only(url)?),
        #[cfg(feature = "postgres")]
        (Location::Postgres(url), Access::Write) => Arc::new(PgStore::connect(url)?),
        #[cfg(not(feature = "postgres"))]
        (Location::Postgres(url), _) => {
            return Err(StoreError::BadLocation {
                location: redact_url(url),
                reason: "this build has no PostgreSQL backend (the `postgres` feature)".into(),
            })
        }
        (Location::Redb(path), Access::Read) => Arc::new(Store::open_read_only(path)?),
        (Location::Redb(path), Access::Write) => {
            check_parent(path)?;
            Arc::new(Store::open(path)?)
        }
    })
}

/// A store file may be created only in a directory that exists (the default path's are
/// created by [`crate::embedded::default_path`]'s users, never from a typed location).
fn check_parent(path: &Path) -> Result<(), StoreError> {
    if path.exists() {
        return Ok(());
    }
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => return Ok(()),
    };
    if parent.is_dir() {
        return Ok(());
    }
    Err(StoreError::BadLocation {
        location: path.display().to_string(),
        reason: format!(
            "the directory {} does not exist (a store is created only in an existing directory)",
            parent.display()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse_by_scheme() {
        assert_eq!(
            Location::parse("postgres://u@h:5/db").ok(),
            Some(Location::Postgres("postgres://u@h:5/db".into()))
        );
        assert_eq!(
            Location::parse("postgresql://h/db").ok(),
            Some(Location::Postgres("postgresql://h/db".into()))
        );
        assert_eq!(
            Location::parse("dir/s.redb").ok(),
            Some(Location::Redb("dir/s.redb".into()))
        );
        // Not a scheme: a path that happens to hold "://" after a slash.
        assert_eq!(
            Location::parse("a/b://c").ok(),
            Some(Location::Redb("a/b://c".into()))
        );
    }

    #[test]
    fn an_unknown_scheme_is_refused_without_its_password() {
        let error = Location::parse("mysql://u:secret@h/db")
            .err()
            .map(|e| e.to_string());
        let text = error.unwrap_or_default();
        assert!(text.contains("mysql:// is not supported"), "{text}");
        assert!(text.contains("mysql://u@h/db"), "{text}");
        assert!(!text.contains("secret"), "{text}");
        assert!(Location::parse("").is_err());
    }

    #[test]
    fn a_write_never_creates_missing_directories() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("no/such/dir/s.redb");
        let error = open_store(&Location::Redb(path), Access::Write).err();
        assert!(
            matches!(error, Some(StoreError::BadLocation { .. })),
            "{error:?}"
        );
        assert!(!dir.path().join("no").exists());
        let path = dir.path().join("missing.redb");
        let error = open_store(&Location::Redb(path.clone()), Access::Read).err();
        assert!(
            matches!(error, Some(StoreError::Missing { .. })),
            "{error:?}"
        );
        assert!(!path.exists());
        let store = open_store(&Location::Redb(path.clone()), Access::Write);
        assert!(store.is_ok());
        assert!(path.exists());
    }
}
