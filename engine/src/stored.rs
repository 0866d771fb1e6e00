//! The views of a stored session answered in store terms, for the server: a stored event a
//! projection refuses is stored data breaking a rule, hence `StoreError::Corrupt`.

use std::sync::Arc;

use sessionlog_format::projection::{Flow, Projection};
use sessionlog_format::Event;
use sessionlog_projections::meter::{tokens as tokens_of, TokensFold, TokensReport};
use sessionlog_projections::requests::{RequestAnalyzer, RequestOptions, RequestReport};
use sessionlog_projections::show::{Entry, EntryBody, ShowOptions, TranscriptBuilder};

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

/// The context breakdown at each request of a stored session (`tokens`).
pub fn tokens(store: &dyn LogStore, session: &str) -> Result<TokensReport, StoreError> {
    tokens_of(SessionSource::Store { store, session }).map_err(Error::into_store_error)
}

/// Which transcript entries a page holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TranscriptQuery {
    /// Index of the first entry, counted among the entries the filter keeps.
    pub from: u64,
    /// Most entries in the page.
    pub limit: u64,
    /// Keep only the entries of these kinds (`message`, or a marker name such as `prompt` or
    /// `compaction`); empty keeps every entry.
    pub kinds: Vec<String>,
}

/// One page of a stored session's transcript (`show`).
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptPage {
    pub session: String,
    pub entries: Vec<Entry>,
    /// Entries the filter keeps after this page exist.
    pub more: bool,
}

/// The kind of an entry as `show --json` names it.
pub fn entry_kind(entry: &Entry) -> &'static str {
    match &entry.body {
        EntryBody::Message(_) => "message",
        EntryBody::Marker(marker) => marker.name(),
    }
}

/// One page of the transcript of a stored session. The replay stops as soon as the page and
/// one entry after it are final (no compaction or prune still open), so an early page of a
/// long session costs a prefix of its log, not the whole of it.
pub fn transcript_page(
    store: &dyn LogStore,
    session: &str,
    options: ShowOptions,
    query: &TranscriptQuery,
) -> Result<TranscriptPage, StoreError> {
    assert!(query.limit > 0, "a page holds at least one entry");
    let end = query.from.saturating_add(query.limit);
    let fold = SessionSource::Store { store, session }
        .replay(|opening| PageFold {
            builder: TranscriptBuilder::new(opening.session(), opening.snapshot, options),
            kinds: query.kinds.clone(),
            counted: 0,
            kept: 0,
            end,
        })
        .map_err(Error::into_store_error)?;
    let kept = fold.kept;
    let transcript = fold.builder.finish();
    let keep = |entry: &Entry| kept_kind(&query.kinds, entry);
    let entries: Vec<Entry> = transcript
        .entries
        .into_iter()
        .filter(keep)
        .skip(usize::try_from(query.from).unwrap_or(usize::MAX))
        .take(usize::try_from(query.limit).unwrap_or(usize::MAX))
        .collect();
    debug_assert!(entries.len() as u64 <= query.limit);
    Ok(TranscriptPage {
        session: transcript.session,
        entries,
        more: kept > end,
    })
}

fn kept_kind(kinds: &[String], entry: &Entry) -> bool {
    kinds.is_empty() || kinds.iter().any(|k| k == entry_kind(entry))
}

/// The transcript fold that stops once the entries through `end` (and one more) are final.
struct PageFold {
    builder: TranscriptBuilder,
    kinds: Vec<String>,
    /// Entries of the builder already looked at by the filter.
    counted: usize,
    /// Of those, the ones the filter keeps.
    kept: u64,
    end: u64,
}

impl Projection for PageFold {
    type Error = std::convert::Infallible;

    fn push(&mut self, event: Arc<Event>) -> Result<Flow, Self::Error> {
        self.builder.push(&event);
        let entries = self.builder.entries();
        let fresh = entries.get(self.counted..).unwrap_or_default();
        self.kept += fresh.iter().filter(|e| kept_kind(&self.kinds, e)).count() as u64;
        self.counted = entries.len();
        // The entries counted are final only when nothing is open, and the last one counted
        // may still be completed by the event that closes it: stop with one spare.
        if self.kept > self.end && self.builder.is_settled() {
            return Ok(Flow::Stop);
        }
        Ok(Flow::Continue)
    }
}

/// The requests (rows without bodies) and the context breakdown of a stored session, from one
/// replay, so both describe exactly the same events: row `i` of each is request `i`.
pub fn requests_and_tokens(
    store: &dyn LogStore,
    session: &str,
) -> Result<(RequestReport, TokensReport), StoreError> {
    let both = SessionSource::Store { store, session }
        .replay(|opening| RequestsAndTokens {
            requests: RequestAnalyzer::new(
                opening.session(),
                opening.rules(),
                RequestOptions::default(),
            ),
            tokens: TokensFold::new(opening.session()),
        })
        .map_err(Error::into_store_error)?;
    let (requests, tokens) = (both.requests.finish(), both.tokens.finish());
    debug_assert_eq!(
        requests.requests.len(),
        tokens.requests.len(),
        "both folds count the same settled calls"
    );
    Ok((requests, tokens))
}

struct RequestsAndTokens {
    requests: RequestAnalyzer,
    tokens: TokensFold,
}

impl Projection for RequestsAndTokens {
    type Error = String;

    fn push(&mut self, event: Arc<Event>) -> Result<Flow, String> {
        self.tokens.push(&event).map_err(|e| e.to_string())?;
        self.requests
            .push_shared(event)
            .map_err(|e| e.to_string())?;
        Ok(Flow::Continue)
    }
}
