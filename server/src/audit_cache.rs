//! The sessions page (`GET /v1/audit`): one `audit` row per stored session, sorted, filtered
//! and paged on the server, each row remembered with the head it was computed at.
//!
//! A row costs a verify and a replay of its session, so rows are computed only when a page
//! needs them: sorted by id (the default) a page computes its own rows and no other; sorted
//! by a counted column every row is needed once. A row is reused while its session's head
//! (next seq and chain hash) is the one it was computed at, and the head is read again for
//! every row a page uses, so a page never shows a row older than the log.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::{json, Value};
use sessionlog_engine::audit::{audit_stored, AuditRow, Integrity};
use sessionlog_engine::documents::audit_row;
use sessionlog_engine::log_store::LogStore;
use sessionlog_engine::store::{Head, StoreError};

use super::limits::AUDIT_PAGE_ROWS_MAX;

/// The column a page is sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum SortKey {
    #[default]
    Session,
    Events,
    Turns,
    Requests,
    PromptVersions,
    Compactions,
    PredictedReuse,
    Status,
    LastActivity,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum SortOrder {
    #[default]
    Asc,
    Desc,
}

/// What one page asks for.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditQuery {
    pub(crate) from: Option<u64>,
    pub(crate) limit: Option<u64>,
    #[serde(default)]
    pub(crate) sort: SortKey,
    #[serde(default)]
    pub(crate) order: SortOrder,
    /// Keep the sessions whose id contains this text.
    pub(crate) filter: Option<String>,
}

/// One session's row and what it was computed from.
#[derive(Debug, Clone)]
struct CachedRow {
    /// `None` for a session whose head cannot be read.
    head: Option<Head>,
    row: AuditRow,
    /// Time of the session's last event (epoch ms), `None` when it has none.
    last_time: Option<i64>,
}

/// The rows computed so far, by session. It holds one small row per stored session at most.
#[derive(Debug, Default)]
pub(crate) struct AuditCache {
    rows: Mutex<HashMap<String, Arc<CachedRow>>>,
}

impl AuditCache {
    /// The page `query` asks for, as `{"sessions":[<audit row>...],"page":{...}}`; each row
    /// is the `audit --json` row of its session plus `nextSeq`, `headHash` and `lastActivity`.
    pub(crate) fn page(
        &self,
        store: &dyn LogStore,
        query: &AuditQuery,
        limit: u64,
    ) -> Result<Value, StoreError> {
        assert!(
            limit > 0 && limit <= AUDIT_PAGE_ROWS_MAX,
            "the caller bounds the limit"
        );
        let mut ids = store.sessions()?;
        if let Some(filter) = query.filter.as_deref().filter(|f| !f.is_empty()) {
            ids.retain(|id| id.contains(filter));
        }
        let total = ids.len() as u64;
        let from = query.from.unwrap_or(0);
        let start = usize::try_from(from.min(total)).unwrap_or(usize::MAX);
        let end = usize::try_from(from.saturating_add(limit).min(total)).unwrap_or(usize::MAX);
        let rows: Vec<Arc<CachedRow>> = if query.sort == SortKey::Session {
            ids.sort_unstable();
            if query.order == SortOrder::Desc {
                ids.reverse();
            }
            ids.get(start..end)
                .unwrap_or_default()
                .iter()
                .map(|id| self.row(store, id))
                .collect::<Result<_, _>>()?
        } else {
            let mut all: Vec<Arc<CachedRow>> = ids
                .iter()
                .map(|id| self.row(store, id))
                .collect::<Result<_, _>>()?;
            all.sort_by(|a, b| compare(query.sort, a, b));
            if query.order == SortOrder::Desc {
                all.reverse();
            }
            all.drain(start..end).collect()
        };
        debug_assert!(rows.len() as u64 <= limit);
        let sessions: Vec<Value> = rows.iter().map(|r| row_json(r)).collect();
        let next_from = (from.saturating_add(limit) < total).then(|| from + limit);
        Ok(json!({
            "sessions": sessions,
            "page": { "from": from, "limit": limit, "nextFrom": next_from, "total": total },
        }))
    }

    /// The row of `id` at its current head: remembered, or computed now. A session whose
    /// head cannot be read (a damaged record on its way) gets its row computed each time and
    /// never kept: its verify says what is wrong, and there is no head to key it by.
    fn row(&self, store: &dyn LogStore, id: &str) -> Result<Arc<CachedRow>, StoreError> {
        let head = match store.head(id) {
            Ok(head) => head,
            Err(StoreError::Corrupt { .. }) => return self.damaged_row(store, id),
            Err(other) => return Err(other),
        };
        let remembered = self.lock().get(id).cloned();
        if let Some(cached) = remembered.filter(|c| c.head == Some(head)) {
            return Ok(cached);
        }
        let row = audit_stored(store, id).map_err(sessionlog_engine::Error::into_store_error)?;
        let last_time = match head.next_seq {
            0 => None,
            next_seq => store
                .read_range(id, next_seq - 1, next_seq)?
                .last()
                .map(|event| event.time),
        };
        let cached = Arc::new(CachedRow {
            head: Some(head),
            row,
            last_time,
        });
        self.lock().insert(id.to_owned(), Arc::clone(&cached));
        Ok(cached)
    }

    fn damaged_row(&self, store: &dyn LogStore, id: &str) -> Result<Arc<CachedRow>, StoreError> {
        let row = audit_stored(store, id).map_err(sessionlog_engine::Error::into_store_error)?;
        debug_assert!(
            !row.integrity.is_ok(),
            "a session without a head does not verify"
        );
        Ok(Arc::new(CachedRow {
            head: None,
            row,
            last_time: None,
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<CachedRow>>> {
        // A panic while the map is held leaves it whole (inserts and reads only).
        self.rows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn row_json(cached: &CachedRow) -> Value {
    let mut row = audit_row(&cached.row);
    if let Some(object) = row.as_object_mut() {
        let next_seq = cached.head.map(|h| h.next_seq);
        let hash = cached
            .head
            .map(|h| sessionlog_engine::documents::hex(&h.chain));
        object.insert("nextSeq".into(), next_seq.into());
        object.insert("headHash".into(), hash.into());
        object.insert("lastActivity".into(), cached.last_time.into());
    }
    row
}

/// Orders two rows by `key`, then by session id, so every order is total and stable.
fn compare(key: SortKey, a: &CachedRow, b: &CachedRow) -> Ordering {
    let (x, y) = (&a.row, &b.row);
    let by_key = match key {
        SortKey::Session => Ordering::Equal,
        SortKey::Events => x.events.cmp(&y.events),
        SortKey::Turns => x.turns.cmp(&y.turns),
        SortKey::Requests => x.requests.requests.cmp(&y.requests.requests),
        SortKey::PromptVersions => x.prompt_versions.cmp(&y.prompt_versions),
        SortKey::Compactions => x.compactions.cmp(&y.compactions),
        SortKey::PredictedReuse => reuse(x).total_cmp(&reuse(y)),
        SortKey::Status => status_rank(&x.integrity).cmp(&status_rank(&y.integrity)),
        SortKey::LastActivity => a.last_time.cmp(&b.last_time),
    };
    by_key.then_with(|| x.session.cmp(&y.session))
}

/// A session without requests sorts below every ratio.
fn reuse(row: &AuditRow) -> f64 {
    if row.requests.requests == 0 {
        -1.0
    } else {
        row.requests.predicted_reuse_ratio
    }
}

fn status_rank(integrity: &Integrity) -> u8 {
    match integrity {
        Integrity::Ok => 0,
        Integrity::Refused { .. } => 1,
        Integrity::Corrupt { .. } => 2,
    }
}
