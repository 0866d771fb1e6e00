//! Where a store lives, as the command line names it: a redb file path or a `postgres://`
//! URL (any other `scheme://` is refused), what an opener may do with it, and the URL as
//! messages show it (without its password).

use std::path::PathBuf;

use crate::embedded::StoreError;

/// Where a store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// An embedded redb file.
    Redb(PathBuf),
    /// A PostgreSQL database (or an engine speaking its protocol), by connection URL.
    Postgres(String),
}

/// What the opener may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read only: nothing is created or written.
    Read,
    /// Read and write; a missing store is created (its parent directory must exist).
    Write,
}

impl Location {
    /// Parses a location as the command line gives it.
    pub fn parse(text: &str) -> Result<Location, StoreError> {
        if let Some((scheme, _)) = text.split_once("://") {
            let plain = !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
            if plain {
                return match scheme.to_ascii_lowercase().as_str() {
                    "postgres" | "postgresql" => Ok(Location::Postgres(text.to_owned())),
                    _ => Err(StoreError::BadLocation {
                        location: redact_url(text),
                        reason: format!(
                            "the scheme {scheme}:// is not supported (a redb file path or a \
                             postgres:// URL)"
                        ),
                    }),
                };
            }
        }
        if text.is_empty() {
            return Err(StoreError::BadLocation {
                location: String::new(),
                reason: "an empty location (a redb file path or a postgres:// URL)".into(),
            });
        }
        Ok(Location::Redb(PathBuf::from(text)))
    }

    /// The location for messages: a URL without its password.
    pub fn display(&self) -> String {
        match self {
            Location::Redb(path) => path.display().to_string(),
            Location::Postgres(url) => redact_url(url),
        }
    }
}

/// `url` without its password, for messages.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(name, _)| name);
            format!("{scheme}://{user}@{host}{path}")
        }
        None => url.to_owned(),
    }
}
