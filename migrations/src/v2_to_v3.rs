//! The V2 -> V3 edge (spec 10): system heads, references, renames and canonical envelopes.
//!
//! [`V2ToV3`] is the streaming stage of spec 10.3. It never reorders source events: when a
//! source has no order-preserving conversion it refuses. [`migrate_v2_to_v3`] runs the stage
//! over a whole log, admits the output under the V3 rules and proves that every request is
//! unchanged (see `proof`).

mod audit;
mod members;
mod rewrite;

use std::collections::HashSet;

use serde_json::Value;
use sessionlog_format::message::Source;
use sessionlog_format::payload::SystemMessageData;
use sessionlog_format::{
    ContentBlock, Event, EventData, EventType, FormatVersion, Message, SessionHeader, SurfaceOp,
};
use sha2::{Digest, Sha256};

use crate::catalog::{Finish, Stage, StageOptions};
use crate::error::{Reason, Refusal};
use crate::migrator::{Migrator, MigratorOptions};

/// The plugin named as the source of generated system messages (dsh upstream's scope).
pub const SYSTEM_PROMPT_PLUGIN: &str = "@deepseek-ai/dsh-system-prompt";

/// The prefix of generated system message ids.
pub const SYSTEM_ID_PREFIX: &str = "v2-to-v3-system-";

/// The result of [`migrate_v2_to_v3`].
#[derive(Debug, Clone, PartialEq)]
pub struct Migrated {
    pub header: SessionHeader,
    pub events: Vec<Event>,
    /// How many source `request/header` events the request-equivalence proof covered.
    pub requests_proved: u64,
    /// The target's inherited cut (0 for an unseeded log).
    pub cut: u64,
}

/// Migrates a whole V2 log: the stage, then V3 admission of the output, then the
/// request-equivalence proof. Use [`migrate_v2_to_v3_with`] for normalized recordings.
pub fn migrate_v2_to_v3(
    header: SessionHeader,
    events: impl IntoIterator<Item = Event>,
) -> Result<Migrated, Refusal> {
    migrate_v2_to_v3_with(header, events, StageOptions::default())
}

/// [`migrate_v2_to_v3`] with explicit options.
pub fn migrate_v2_to_v3_with(
    header: SessionHeader,
    events: impl IntoIterator<Item = Event>,
    options: StageOptions,
) -> Result<Migrated, Refusal> {
    migrate_whole(header, events, options, true)
}

/// The stage alone, without the request-equivalence proof (`migrate --no-verify`). The output
/// is not admitted here either; a writer admits it as it publishes.
pub fn migrate_v2_to_v3_unproved(
    header: SessionHeader,
    events: impl IntoIterator<Item = Event>,
    options: StageOptions,
) -> Result<Migrated, Refusal> {
    migrate_whole(header, events, options, false)
}

fn migrate_whole(
    header: SessionHeader,
    events: impl IntoIterator<Item = Event>,
    options: StageOptions,
    prove: bool,
) -> Result<Migrated, Refusal> {
    let stage: Box<dyn Stage> = Box::new(V2ToV3::new(options));
    let options = MigratorOptions {
        stage: options,
        prove,
        target: FormatVersion::V3,
    };
    let (mut migrator, header) =
        Migrator::with_stages(FormatVersion::V2, vec![stage], header, options)?;
    let mut out = Vec::new();
    for event in events {
        migrator.push(event, &mut out)?;
    }
    let summary = migrator.finish(&mut out)?;
    Ok(Migrated {
        header,
        events: out,
        requests_proved: summary.requests_proved.unwrap_or(0),
        cut: summary.cut,
    })
}

/// The deterministic id of the system message anchored at source event `anchor_seq` of type
/// `anchor_type`: the prefix plus the lowercase hex SHA-256 of the compact JSON array
/// `["session-format-v2-to-v3", session_id, anchor_seq, anchor_type]`. serde_json's compact
/// output equals JavaScript's `JSON.stringify` here: both escape only `"`, `\` and control
/// characters (as `\n`-style escapes or lowercase `\u00xx`), and a Rust string holds no lone
/// surrogate.
pub fn system_message_id(session_id: &str, anchor_seq: u64, anchor_type: &str) -> String {
    let key = serde_json::json!([
        "session-format-v2-to-v3",
        session_id,
        anchor_seq,
        anchor_type
    ]);
    let text = serde_json::to_string(&key).expect("an array of strings and an integer serializes");
    let digest = Sha256::digest(text.as_bytes());
    let mut id = String::with_capacity(SYSTEM_ID_PREFIX.len() + 64);
    id.push_str(SYSTEM_ID_PREFIX);
    for byte in digest {
        id.push_str(&format!("{byte:02x}"));
    }
    id
}

/// The V2 -> V3 stage for one log (spec 10.3).
#[derive(Debug, Clone)]
pub struct V2ToV3 {
    options: StageOptions,
    /// Set by [`Stage::header`].
    session: Option<SessionFacts>,
    finished: bool,
    /// Source seq -> target seq, indexed by source seq.
    mapping: Vec<u64>,
    target_seq: u64,
    step: Option<(u64, u64)>,
    head: Option<u64>,
    prompt: String,
    original_ids: HashSet<String>,
    generated_ids: HashSet<String>,
    /// `(source cut, target cut)` from the inherited marker.
    cut: Option<(u64, u64)>,
    /// Source seqs of current-generation delivery markers naming another session.
    foreign_deliveries: Vec<(u64, String)>,
}

#[derive(Debug, Clone)]
struct SessionFacts {
    id: String,
    seeded: bool,
    has_parent: bool,
}

/// The source event a synthetic system event is anchored to.
struct Anchor {
    seq: u64,
    time: i64,
    kind: &'static str,
}

impl V2ToV3 {
    pub fn new(options: StageOptions) -> V2ToV3 {
        V2ToV3 {
            options,
            session: None,
            finished: false,
            mapping: Vec::new(),
            target_seq: 0,
            step: None,
            head: None,
            prompt: String::new(),
            original_ids: HashSet::new(),
            generated_ids: HashSet::new(),
            cut: None,
            foreign_deliveries: Vec::new(),
        }
    }

    /// Source seq -> target seq for every event pushed so far, indexed by source seq.
    pub fn mapping(&self) -> &[u64] {
        &self.mapping
    }

    fn session(&self) -> &SessionFacts {
        self.session
            .as_ref()
            .expect("Stage::header runs before any event")
    }

    fn push_event(&mut self, event: Event, out: &mut Vec<Event>) -> Result<(), Reason> {
        let seq = event.seq;
        let expected = self.mapping.len() as u64;
        if seq != expected {
            return Err(Reason::NotDense {
                expected,
                found: seq,
            });
        }
        audit::audit(&event)?;
        self.record_source_ids(&event)?;
        let anchor = Anchor {
            seq,
            time: event.time,
            kind: anchor_kind(&event.kind),
        };
        if let EventData::RequestHeader(data) = &event.data {
            let prompt = match &data.header.system {
                Some(Value::String(text)) => text.clone(),
                _ => String::new(),
            };
            if prompt != self.prompt {
                self.emit_system(&anchor, prompt, out)?;
            }
        }
        if event.kind.is_surface_pre_v3() && self.head.is_none() {
            return Err(Reason::SurfaceBeforeFirstStep);
        }
        self.track_markers(&event)?;
        let step_start = match &event.data {
            EventData::StepStart(step) => Some((step.turn, step.step)),
            _ => None,
        };
        let closes_step = matches!(event.data, EventData::StepEnd(_) | EventData::TurnEnd(_));
        let mut target = event;
        rewrite::rewrite(&mut target, &self.mapping)?;
        target.seq = self.target_seq;
        self.mapping.push(self.target_seq);
        self.target_seq += 1;
        out.push(target);
        if let Some(step) = step_start {
            self.step = Some(step);
            if self.head.is_none() {
                self.emit_system(&anchor, String::new(), out)?;
            }
        }
        if closes_step {
            self.step = None;
        }
        Ok(())
    }

    /// Spec 10.3 step 3: a source id must not equal an id generated earlier.
    fn record_source_ids(&mut self, event: &Event) -> Result<(), Reason> {
        for id in source_message_ids(event) {
            if self.generated_ids.contains(id) {
                return Err(Reason::SourceIdCollision { id: id.to_owned() });
            }
            if !self.original_ids.contains(id) {
                self.original_ids.insert(id.to_owned());
            }
        }
        Ok(())
    }

    /// Spec 10.3 steps 6 and 7: the inherited marker and the delivery markers.
    fn track_markers(&mut self, event: &Event) -> Result<(), Reason> {
        match &event.data {
            EventData::SessionEndSeed(data) if data.inherited == Some(true) => {
                if !self.session().seeded {
                    return Err(Reason::InheritedMarkerUnseeded);
                }
                self.cut = Some((event.seq, self.target_seq));
            }
            EventData::Other(data) if event.kind == EventType::DeliveryAccepted => {
                match data.get("sessionFormatVersion").and_then(Value::as_u64) {
                    Some(3) => return Err(Reason::DeliveryClaimsV3),
                    Some(2) => {
                        let named = data.get("sessionId").and_then(Value::as_str).unwrap_or("");
                        if named != self.session().id {
                            self.foreign_deliveries.push((event.seq, named.to_owned()));
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Emits the system event for `prompt` anchored at `anchor` (spec 10.3, "Emitting a
    /// system event"): the first head appends, every later change replaces the head.
    fn emit_system(
        &mut self,
        anchor: &Anchor,
        prompt: String,
        out: &mut Vec<Event>,
    ) -> Result<(), Reason> {
        assert!(
            !anchor.kind.is_empty(),
            "anchors are step/start or request/header"
        );
        let Some((turn, step)) = self.step else {
            return Err(Reason::PromptOutsideStep);
        };
        let id = system_message_id(&self.session().id, anchor.seq, anchor.kind);
        if self.original_ids.contains(&id) || self.generated_ids.contains(&id) {
            return Err(Reason::GeneratedIdCollision { id });
        }
        let content = if prompt.is_empty() {
            Vec::new()
        } else {
            vec![ContentBlock::text(prompt.clone())]
        };
        let message = Message {
            id: Some(id.clone()),
            role: Some("system".to_owned()),
            content,
            source: Some(plugin_source(SYSTEM_PROMPT_PLUGIN)),
            extra: Default::default(),
        };
        let data = SystemMessageData {
            turn,
            step,
            message,
            extra: Default::default(),
        };
        let event = Event::new(
            self.target_seq,
            anchor.time,
            EventData::SystemMessage(Box::new(data)),
        );
        let event = match self.head {
            None => event.with_surface_op(SurfaceOp::Append),
            Some(head) => event
                .with_surface_op(SurfaceOp::Replace {
                    start_seq: head,
                    end_seq: head,
                })
                .with_sources(vec![head]),
        };
        self.generated_ids.insert(id);
        self.head = Some(self.target_seq);
        self.prompt = prompt;
        self.target_seq += 1;
        out.push(event);
        Ok(())
    }

    fn finish_log(&mut self) -> Result<Finish, Refusal> {
        let session = self.session().clone();
        let cut = match (session.seeded, self.cut) {
            (false, _) => None,
            (true, Some(cut)) => Some(cut),
            (true, None) => {
                return Err(Refusal::v2_to_v3(None, Reason::InheritedMarkerMissing));
            }
        };
        for (seq, named) in &self.foreign_deliveries {
            let inherited = cut.is_some_and(|(source_cut, _)| *seq < source_cut);
            if !(session.has_parent && inherited) {
                let reason = Reason::DeliveryWrongSession {
                    session_id: named.clone(),
                };
                return Err(Refusal::v2_to_v3(Some(*seq), reason));
            }
        }
        Ok(Finish {
            cut: cut.map_or(0, |(_, target_cut)| target_cut),
        })
    }
}

impl Stage for V2ToV3 {
    fn from(&self) -> FormatVersion {
        FormatVersion::V2
    }

    fn to(&self) -> FormatVersion {
        FormatVersion::V3
    }

    /// Spec 10.2: validated as released V2, then carried over as V3 with the preset renamed.
    fn header(&mut self, mut header: SessionHeader) -> Result<SessionHeader, Refusal> {
        let invalid = |detail: String| Refusal::v2_to_v3(None, Reason::InvalidHeader { detail });
        if header.version != Some(2) {
            return Err(invalid(format!("version is {:?}, not 2", header.version)));
        }
        header
            .check(FormatVersion::V2, self.options.snapshot)
            .map_err(invalid)?;
        self.session = Some(SessionFacts {
            id: header.id.clone(),
            seeded: header.seeded(),
            has_parent: header.parent_session.is_some(),
        });
        header.version = Some(3);
        if header.agent_preset.as_deref() == Some("code") {
            header.agent_preset = Some("ptc".to_owned());
        }
        Ok(header)
    }

    fn push(&mut self, event: Event, out: &mut Vec<Event>) -> Result<(), Refusal> {
        let seq = event.seq;
        if self.finished {
            return Err(Refusal::v2_to_v3(Some(seq), Reason::Finished));
        }
        self.push_event(event, out)
            .map_err(|reason| Refusal::v2_to_v3(Some(seq), reason))
    }

    fn finish(&mut self, _out: &mut Vec<Event>) -> Result<Finish, Refusal> {
        if self.finished {
            return Err(Refusal::v2_to_v3(None, Reason::Finished));
        }
        self.finished = true;
        self.finish_log()
    }
}

/// The anchor types are `step/start` and `request/header`; both keep their name in V3.
fn anchor_kind(kind: &EventType) -> &'static str {
    match kind {
        EventType::StepStart => "step/start",
        EventType::RequestHeader => "request/header",
        _ => "",
    }
}

fn plugin_source(plugin: &str) -> Source {
    Source {
        kind: "plugin".to_owned(),
        plugin: Some(plugin.to_owned()),
        provider: None,
        model: None,
        call_id: None,
        extra: Default::default(),
    }
}

/// The message ids a source event carries (spec 10.3 step 3).
fn source_message_ids(event: &Event) -> Vec<&str> {
    let opaque_list = |key: &str| -> Vec<&str> {
        let EventData::Other(data) = &event.data else {
            return Vec::new();
        };
        let items = data.get(key).and_then(Value::as_array);
        let ids = items.into_iter().flatten();
        ids.filter_map(|item| item.get("id").and_then(Value::as_str))
            .collect()
    };
    match (&event.kind, event.message()) {
        (EventType::AgentInboxSpliced, _) => opaque_list("inserted"),
        (EventType::SessionTitleLlmRequest, _) => opaque_list("messages"),
        (_, Some(message)) => message.id.as_deref().into_iter().collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: generated ids hash the JSON.stringify form of the key array, lowercase hex.
    // Method: digests computed independently (a JSON.stringify-equivalent serializer plus
    // SHA-256), including a session id that needs escapes and a non-ASCII character.
    #[test]
    fn system_message_id_hashes_the_compact_key() {
        assert_eq!(
            system_message_id("s1", 10, "request/header"),
            "v2-to-v3-system-b52664a6d0cddb7cc40009cb473623fb008566d0e60b22ee9b34d9ba3acdd889"
        );
        assert_eq!(
            system_message_id("a\"b\n\u{1}\u{e9}", 10, "request/header"),
            "v2-to-v3-system-4b7b2dcdaad828efaa05778d7b389fbc78342df55e6884fb5062e6f5889d9f32"
        );
    }
}
