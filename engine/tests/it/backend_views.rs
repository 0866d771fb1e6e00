//! The backend suite's views: folds (messages, surface) and rebuilt requests agree on every
//! backend (the backends themselves are tested in the store crate's suite, whose helpers
//! this reuses).

use pretty_assertions::assert_eq;
use sessionlog_engine::error::Error;
use sessionlog_engine::inspect::fold_session;
use sessionlog_engine::replay::SessionSource;
use sessionlog_engine::requests::RequestOptions;
use sessionlog_engine::store::StoreError;

use crate::harness::{append_all, backends, session};

// Goal: folds (messages, surface) and rebuilt requests come out the same on every backend, at
// the head and at an earlier seq.
// Method: one generated session on each backend; compare the views with the redb ones.
#[test]
fn folds_and_requests_agree_across_backends() {
    let (header, batches) = session("folds", 800);
    let mut views = Vec::new();
    for backend in backends("folds_and_requests_agree_across_backends") {
        let store = backend.store.as_ref();
        append_all(store, &header, &batches);
        let source = SessionSource::Store {
            store,
            session: &header.id,
        };
        let head = fold_session(source, None).unwrap();
        let earlier = fold_session(source, Some(300)).unwrap();
        assert_eq!(earlier.at_seq, Some(300));
        let past = fold_session(source, Some(5000));
        assert!(matches!(
            past,
            Err(Error::Store(StoreError::SeqOutOfRange { .. }))
        ));
        let messages: Vec<_> = head.messages().into_iter().cloned().collect();
        let earlier_messages: Vec<_> = earlier.messages().into_iter().cloned().collect();
        let options = RequestOptions { bodies: true };
        let requests = sessionlog_engine::stored::requests(store, &header.id, options).unwrap();
        views.push((
            backend.name,
            messages,
            head.nodes(),
            earlier_messages,
            requests,
        ));
    }
    let first = &views[0];
    assert!(!first.1.is_empty(), "the generated session has messages");
    for view in &views[1..] {
        assert_eq!(view.1, first.1, "{}", view.0);
        assert_eq!(view.2, first.2, "{}", view.0);
        assert_eq!(view.3, first.3, "{}", view.0);
        assert_eq!(view.4, first.4, "{}", view.0);
    }
}
