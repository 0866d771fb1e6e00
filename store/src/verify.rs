//! `verify` over any [`LogStore`]: every record through the one record walk (the embedded
//! store's `Walk`: crc, chain link, seq density, the body, every admission rule by a fresh
//! fold), and per session the persisted checkpoint against the fresh fold.

use sessionlog_format::record;

use crate::embedded::verify::Walk;
use crate::log_store::{LogStore, READ_EVENTS_MAX};
use crate::types::{SessionReport, StoreError};

/// `verify` over [`LogStore::read_records`]: per record the crc, the chain link, seq density,
/// the body's decoding and every admission rule (a fold from scratch); per session the
/// persisted checkpoint against the fresh fold. As in the redb verify, a fault does not stop
/// the walk: the chain resyncs on the stored value, and the fold stops after a rule fault.
pub fn verify<S: LogStore + ?Sized>(
    store: &S,
    sessions: &[String],
) -> Result<Vec<SessionReport>, StoreError> {
    let ids = if sessions.is_empty() {
        store.sessions()?
    } else {
        sessions.to_vec()
    };
    ids.iter().map(|id| verify_session(store, id)).collect()
}

fn verify_session<S: LogStore + ?Sized>(
    store: &S,
    session: &str,
) -> Result<SessionReport, StoreError> {
    let info = match store.session_info(session) {
        Ok(info) => info,
        Err(StoreError::Corrupt { reason }) => return Ok(Walk::session_fault(session, reason)),
        Err(other) => return Err(other),
    };
    // Compared by its journal's reference only, so the journal is not held through the walk.
    let checkpoint = store.checkpoint_by_reference(session)?;
    let mut walk = Walk::new(
        session,
        record::genesis_chain(&info.header),
        info.fold(),
        checkpoint
            .as_ref()
            .and_then(|c| c.as_ref().ok())
            .map(|c| c.0),
        store.kept_checkpoint_seqs(session)?,
    );
    let mut from_seq = 0;
    loop {
        let records = store.read_records(session, from_seq, u64::MAX)?;
        let Some(last) = records.last() else { break };
        from_seq = last.seq.saturating_add(1);
        let n_records = records.len();
        for stored in records {
            walk.record(stored.seq, &stored.bytes);
        }
        walk.check_kept(|seq| {
            Ok(store
                .kept_checkpoint_below(session, seq)?
                .filter(|(key, _)| *key == seq)
                .map(|(_, bytes)| bytes))
        })?;
        if (n_records as u64) < READ_EVENTS_MAX || from_seq == u64::MAX {
            break;
        }
    }
    // Read before the records, so a checkpoint a writer stores meanwhile is not compared
    // with the fold at the seq of the one before.
    walk.finish(|| Ok(checkpoint))
}
