//! Deciding and writing `request/header` (reasons initial, resume, change, series; spec 8.3)
//! and `request/context` (whenever provider, model, capacity or mode differs; spec 8.1).
//!
//! Header equality is the format crate's canonical `headers_equal` (spec 8.2); it compares
//! config, adapter-default flags and tools, never the prompt, which lives on the surface.

use serde_json::{Number, Value};
use sessionlog_format::fold::{canonical_header, headers_equal};
use sessionlog_format::payload::{CallConfig, EpochHeader, RequestContextData, RequestHeaderData};
use sessionlog_format::{Event, EventData, Extra};

use super::tools::ToolSchema;

/// Why a `request/header` is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderReason {
    /// The log's first header.
    Initial,
    /// A loop instance's first request over a log that already has headers.
    Resume,
    /// The canonical header differs from the latest one.
    Change,
    /// Unchanged, but the request starts a new series.
    Series,
}

impl HeaderReason {
    pub fn as_str(self) -> &'static str {
        match self {
            HeaderReason::Initial => "initial",
            HeaderReason::Resume => "resume",
            HeaderReason::Change => "change",
            HeaderReason::Series => "series",
        }
    }
}

/// A header to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderDecision {
    pub reason: HeaderReason,
    /// `startsSeries: true`, carried by a `change` that starts a series.
    pub starts_series: bool,
}

/// What the header decision reads.
#[derive(Debug, Clone, Copy)]
pub struct HeaderInputs<'a> {
    /// The latest header of the log (canonical), if any.
    pub latest: Option<&'a EpochHeader>,
    pub next: &'a EpochHeader,
    /// This is the loop instance's first request.
    pub first_of_instance: bool,
    pub starts_series: bool,
}

/// The header to write for a request, or `None` when the request inherits the latest one.
pub fn decide_header(inputs: HeaderInputs<'_>) -> Option<HeaderDecision> {
    let decision = |reason, starts_series| {
        Some(HeaderDecision {
            reason,
            starts_series,
        })
    };
    let Some(latest) = inputs.latest else {
        return decision(HeaderReason::Initial, false);
    };
    if inputs.first_of_instance {
        return decision(HeaderReason::Resume, false);
    }
    if !headers_equal(latest, &canonical_header(inputs.next)) {
        return decision(HeaderReason::Change, inputs.starts_series);
    }
    if inputs.starts_series {
        return decision(HeaderReason::Series, false);
    }
    None
}

/// Whether `next` differs from the latest context in provider, model, `contextWindow` or
/// `systemPromptUpdate` (no latest context: it differs).
pub fn context_differs(latest: Option<&RequestContextData>, next: &RequestContextData) -> bool {
    let Some(latest) = latest else {
        return true;
    };
    let window = |n: Option<&Number>| n.map(Number::to_string);
    latest.provider != next.provider
        || latest.model != next.model
        || window(latest.context_window.as_ref()) != window(next.context_window.as_ref())
        || latest.system_prompt_update != next.system_prompt_update
}

/// The epoch header of a call: `tools` absent when there are none (never `[]` in V3).
pub fn epoch_header(config: CallConfig, tools: &[ToolSchema]) -> EpochHeader {
    let tools =
        (!tools.is_empty()).then(|| Value::Array(tools.iter().map(|t| t.schema.clone()).collect()));
    EpochHeader {
        config,
        adapter_defaults: None,
        tools,
        system: None,
        extra: Extra::new(),
    }
}

/// The `request/header` event, with the header in canonical form.
pub fn header_event(seq: u64, time: i64, header: &EpochHeader, decision: HeaderDecision) -> Event {
    let data = RequestHeaderData {
        header: canonical_header(header),
        reason: decision.reason.as_str().to_owned(),
        starts_series: decision.starts_series.then_some(true),
        extra: Extra::new(),
    };
    Event::new(seq, time, EventData::RequestHeader(Box::new(data)))
}

/// The `request/context` event.
pub fn context_event(seq: u64, time: i64, context: RequestContextData) -> Event {
    Event::new(seq, time, EventData::RequestContext(Box::new(context)))
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn header(model: &str, tools: &[&str]) -> EpochHeader {
        let config = CallConfig {
            provider: Some("p".into()),
            model: model.into(),
            reasoning_effort: None,
            temperature: None,
            max_tokens: None,
            stop: None,
            extra: Extra::new(),
        };
        let tools: Vec<ToolSchema> = tools
            .iter()
            .map(|n| ToolSchema {
                name: (*n).into(),
                schema: json!({ "name": n }),
            })
            .collect();
        epoch_header(config, &tools)
    }

    fn decide(
        latest: Option<&EpochHeader>,
        next: &EpochHeader,
        first: bool,
        series: bool,
    ) -> Option<HeaderDecision> {
        decide_header(HeaderInputs {
            latest,
            next,
            first_of_instance: first,
            starts_series: series,
        })
    }

    fn reason(r: HeaderReason, starts_series: bool) -> Option<HeaderDecision> {
        Some(HeaderDecision {
            reason: r,
            starts_series,
        })
    }

    // Goal: the four reasons and the inherited header. Method: every combination that
    // matters.
    #[test]
    fn header_reasons() {
        let a = header("m", &["read"]);
        let b = header("m", &["read", "write"]);
        assert_eq!(
            decide(None, &a, true, false),
            reason(HeaderReason::Initial, false)
        );
        assert_eq!(
            decide(None, &a, false, true),
            reason(HeaderReason::Initial, false)
        );
        assert_eq!(
            decide(Some(&a), &a, true, false),
            reason(HeaderReason::Resume, false)
        );
        assert_eq!(
            decide(Some(&a), &b, false, false),
            reason(HeaderReason::Change, false)
        );
        assert_eq!(
            decide(Some(&a), &b, false, true),
            reason(HeaderReason::Change, true)
        );
        assert_eq!(
            decide(Some(&a), &a, false, true),
            reason(HeaderReason::Series, false)
        );
        assert_eq!(decide(Some(&a), &a, false, false), None);
        assert_eq!(
            decide(Some(&a), &header("n", &["read"]), false, false).map(|d| d.reason),
            Some(HeaderReason::Change)
        );
    }

    // Goal: the context is logged when any of its four fields differs. Method: one change at
    // a time.
    #[test]
    fn context_changes() {
        let base = RequestContextData {
            provider: "p".into(),
            model: "m".into(),
            context_window: Some(Number::from(10u64)),
            system_prompt_update: Some("in-history".into()),
            extra: Extra::new(),
        };
        assert!(context_differs(None, &base));
        assert!(!context_differs(Some(&base), &base.clone()));
        let mut other = base.clone();
        other.provider = "q".into();
        assert!(context_differs(Some(&base), &other));
        let mut other = base.clone();
        other.model = "n".into();
        assert!(context_differs(Some(&base), &other));
        let mut other = base.clone();
        other.context_window = None;
        assert!(context_differs(Some(&base), &other));
        let mut other = base.clone();
        other.system_prompt_update = None;
        assert!(context_differs(Some(&base), &other));
    }

    // Goal: an empty tool list is written absent, and the event is canonical.
    // Method: build a header event without tools.
    #[test]
    fn header_event_is_canonical() {
        let event = header_event(
            3,
            0,
            &header("m", &[]),
            HeaderDecision {
                reason: HeaderReason::Series,
                starts_series: false,
            },
        );
        let EventData::RequestHeader(data) = &event.data else {
            panic!("a request/header");
        };
        assert_eq!(data.header.tools, None);
        assert_eq!(data.reason, "series");
        assert_eq!(data.starts_series, None);
    }
}
