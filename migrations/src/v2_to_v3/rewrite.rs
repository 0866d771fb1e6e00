//! Rewrites of one emitted event: reference remapping (spec 10.4), the PTC and preset renames
//! (10.5) and canonical envelopes (10.7).

use serde_json::Value;
use sessionlog_format::payload::{EpochHeader, SeqRange};
use sessionlog_format::{Event, EventData, EventType, SurfaceOp};

use crate::error::Reason;

/// Applies every rewrite to `event`; `mapping` holds the target seq of every earlier source
/// event, indexed by source seq.
pub(crate) fn rewrite(event: &mut Event, mapping: &[u64]) -> Result<(), Reason> {
    remap_envelope(event, mapping)?;
    remap_payload(event, mapping)?;
    rename(event);
    if let EventData::RequestHeader(data) = &mut event.data {
        canonicalize_header(&mut data.header);
    }
    Ok(())
}

/// Spec 10.3 step 4 and 10.7: `header.system` is always stripped, and exactly `tools: []` and
/// `adapterDefaults: {}` are dropped. Nothing else (`config.stop: []`, whitespace, extras) is
/// touched.
pub(crate) fn canonicalize_header(header: &mut EpochHeader) {
    header.system = None;
    if matches!(&header.tools, Some(Value::Array(items)) if items.is_empty()) {
        header.tools = None;
    }
    if matches!(&header.adapter_defaults, Some(Value::Object(flags)) if flags.is_empty()) {
        header.adapter_defaults = None;
    }
}

fn map_seq(mapping: &[u64], field: &'static str, seq: u64) -> Result<u64, Reason> {
    let idx = usize::try_from(seq).ok();
    match idx.and_then(|idx| mapping.get(idx)) {
        Some(&target) => Ok(target),
        None => Err(Reason::UnmappedReference { field, target: seq }),
    }
}

/// Spec 10.4, surface envelope: `sourceEventSeqs` and the replace endpoints. The endpoints
/// are written `startSeq`/`endSeq` by the V3 encoder; the typed op has no spelling of its own.
fn remap_envelope(event: &mut Event, mapping: &[u64]) -> Result<(), Reason> {
    if let Some(seqs) = &mut event.source_event_seqs {
        for seq in seqs.iter_mut() {
            *seq = map_seq(mapping, "sourceEventSeqs", *seq)?;
        }
    }
    if let Some(SurfaceOp::Replace { start_seq, end_seq }) = &mut event.surface_op {
        *start_seq = map_seq(mapping, "surfaceOp.start", *start_seq)?;
        *end_seq = map_seq(mapping, "surfaceOp.end", *end_seq)?;
    }
    Ok(())
}

fn remap_payload(event: &mut Event, mapping: &[u64]) -> Result<(), Reason> {
    let kind = event.kind.clone();
    match &mut event.data {
        EventData::CompactionSummary(data) => {
            remap_shadowed(&mut data.shadowed_range, &mut data.shadowed_seqs, mapping)
        }
        EventData::CompactionPrune(data) => {
            remap_shadowed(&mut data.shadowed_range, &mut data.shadowed_seqs, mapping)
        }
        EventData::Other(data) => match kind {
            EventType::CommandDone => remap_opaque_seq(data, "sourceEventSeq", mapping, &kind),
            EventType::SessionTitle | EventType::SessionTitleLlmRequest => {
                remap_opaque_seqs(data, "messageSeqs", mapping, &kind)
            }
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

fn remap_shadowed(range: &mut SeqRange, seqs: &mut [u64], mapping: &[u64]) -> Result<(), Reason> {
    range.start = map_seq(mapping, "shadowedRange.start", range.start)?;
    range.end = map_seq(mapping, "shadowedRange.end", range.end)?;
    for seq in seqs.iter_mut() {
        *seq = map_seq(mapping, "shadowedSeqs", *seq)?;
    }
    Ok(())
}

fn not_a_seq(kind: &EventType, key: &str) -> Reason {
    Reason::Payload {
        kind: kind.as_str().to_owned(),
        detail: format!("{key} must hold non-negative integer seqs"),
    }
}

fn remap_opaque_seq(
    data: &mut Value,
    key: &'static str,
    mapping: &[u64],
    kind: &EventType,
) -> Result<(), Reason> {
    let Some(value) = data.get_mut(key) else {
        return Ok(());
    };
    let seq = value.as_u64().ok_or_else(|| not_a_seq(kind, key))?;
    *value = Value::from(map_seq(mapping, key, seq)?);
    Ok(())
}

fn remap_opaque_seqs(
    data: &mut Value,
    key: &'static str,
    mapping: &[u64],
    kind: &EventType,
) -> Result<(), Reason> {
    let Some(value) = data.get_mut(key) else {
        return Ok(());
    };
    let items = value.as_array_mut().ok_or_else(|| not_a_seq(kind, key))?;
    for item in items {
        let seq = item.as_u64().ok_or_else(|| not_a_seq(kind, key))?;
        *item = Value::from(map_seq(mapping, key, seq)?);
    }
    Ok(())
}

/// Spec 10.5: the PTC event tags, the `tools-code-mode` plugin attribution in exactly three
/// places, and the `code` preset. Look-alikes (`tools-code-mode-extra`, ids, free text) stay.
fn rename(event: &mut Event) {
    match event.kind {
        EventType::ToolCodeDispatchStart => event.kind = EventType::ToolPtcDispatchStart,
        EventType::ToolCodeDispatch => event.kind = EventType::ToolPtcDispatch,
        _ => {}
    }
    let kind = event.kind.clone();
    match &mut event.data {
        EventData::UserMessage(message) => {
            if let Some(source) = &mut message.source {
                if source.kind == "plugin" && source.plugin.as_deref() == Some("tools-code-mode") {
                    source.plugin = Some("tools-ptc".to_owned());
                }
            }
        }
        EventData::Other(data) => match kind {
            EventType::AgentInboxSpliced => rename_opaque_sources(data, "inserted"),
            EventType::SessionTitleLlmRequest => rename_opaque_sources(data, "messages"),
            EventType::AgentPresetSelected => {
                if let Some(preset) = data.get_mut("agentPreset") {
                    if preset.as_str() == Some("code") {
                        *preset = Value::from("ptc");
                    }
                }
            }
            _ => {}
        },
        _ => {}
    }
}

fn rename_opaque_sources(data: &mut Value, key: &str) {
    let Some(items) = data.get_mut(key).and_then(Value::as_array_mut) else {
        return;
    };
    for item in items {
        let Some(source) = item.get_mut("source").and_then(Value::as_object_mut) else {
            continue;
        };
        let plugin_kind = source.get("kind").and_then(Value::as_str) == Some("plugin");
        let code_mode = source.get("plugin").and_then(Value::as_str) == Some("tools-code-mode");
        if plugin_kind && code_mode {
            source.insert("plugin".to_owned(), Value::from("tools-ptc"));
        }
    }
}
