//! The per-request views of the last few sessions asked for (the compact `requests` rows and
//! `tokens`), each remembered with the head it was folded at, so that the console's charts
//! page through a long session at the cost of one replay, not one per page.
//!
//! Memory: at most `DERIVED_SESSIONS_MAX` sessions, each its request rows without bodies
//! and its token breakdowns: linear in the session's requests.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use sessionlog_engine::log_store::LogStore;
use sessionlog_engine::meter::TokensReport;
use sessionlog_engine::requests::RequestReport;
use sessionlog_engine::store::StoreError;
use sessionlog_engine::stored::requests_and_tokens;

use super::limits::DERIVED_SESSIONS_MAX;

/// One session's views at one head.
#[derive(Debug)]
pub(crate) struct Derived {
    pub(crate) session: String,
    /// The head's next seq when the fold started (the fold may have seen later events).
    pub(crate) next_seq: u64,
    pub(crate) requests: RequestReport,
    pub(crate) tokens: TokensReport,
}

#[derive(Debug, Default)]
pub(crate) struct DerivedCache {
    entries: Mutex<VecDeque<Arc<Derived>>>,
}

impl DerivedCache {
    /// The views of `session` at its current head: remembered, or folded now.
    pub(crate) fn get(
        &self,
        store: &dyn LogStore,
        session: &str,
    ) -> Result<Arc<Derived>, StoreError> {
        let next_seq = store.head(session)?.next_seq;
        {
            let mut entries = self.lock();
            let found = entries
                .iter()
                .position(|d| d.session == session && d.next_seq == next_seq);
            if let Some(idx) = found {
                let derived = entries.remove(idx).expect("the index was just found");
                entries.push_front(Arc::clone(&derived));
                return Ok(derived);
            }
        }
        let (requests, tokens) = requests_and_tokens(store, session)?;
        let derived = Arc::new(Derived {
            session: session.to_owned(),
            next_seq,
            requests,
            tokens,
        });
        let mut entries = self.lock();
        entries.retain(|d| d.session != session);
        entries.push_front(Arc::clone(&derived));
        entries.truncate(DERIVED_SESSIONS_MAX);
        assert!(entries.len() <= DERIVED_SESSIONS_MAX);
        Ok(derived)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Derived>>> {
        // A panic while the list is held leaves it whole (pushes and removals only).
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
