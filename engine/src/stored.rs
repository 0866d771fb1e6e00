//! The views of a stored session answered in store terms, for the server: a stored event a
//! projection refuses is stored data breaking a rule, hence `StoreError::Corrupt`.

use sessionlog_projections::requests::{RequestAnalyzer, RequestOptions, RequestReport};

use crate::error::Error;
use crate::log_store::LogStore;
use crate::replay::SessionSource;
use crate::store::StoreError;

/// Every request of a stored session, rebuilt from its log, on any backend.
pub fn requests(
    store: &dyn LogStore,
    session: &str,
    options: RequestOptions,
) -> Result<RequestReport, StoreError> {
    requests_page(store, session, options, 0..u64::MAX)
}

/// [`requests`] keeping only the rows whose index is in `rows`; the summary covers them all.
/// The session replays through the one driver ([`crate::replay`]); an event it refuses is
/// stored data breaking a rule, hence `Corrupt`.
pub fn requests_page(
    store: &dyn LogStore,
    session: &str,
    options: RequestOptions,
    rows: std::ops::Range<u64>,
) -> Result<RequestReport, StoreError> {
    let source = SessionSource::Store { store, session };
    let analyzer = source
        .replay(|opening| {
            RequestAnalyzer::new(opening.session(), opening.rules(), options).keep_rows(rows)
        })
        .map_err(Error::into_store_error)?;
    Ok(analyzer.finish())
}
