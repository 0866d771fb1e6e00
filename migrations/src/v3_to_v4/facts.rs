//! Subagent catalog facts of the V3 -> V4 edge's `finish()` (dsh-v4.md 5.6): the parent's own
//! `subagent/catalog` payloads are validated, and each supplied child missing from them gets
//! one appended.

use serde_json::{json, Map, Value};
use sessionlog_format::v4_rows::{catalog_fact, CatalogFact};

use super::V3Reason;

/// The evidence of one direct subagent child, as dsh's persistence collects it: its id and
/// creation time, how many `subagent/descriptor` events it holds at or after its cut, and the
/// first one's `data` (`Value::Null` when it has none or was unreadable).
#[derive(Debug, Clone, PartialEq)]
pub struct ChildFact {
    pub child_id: String,
    pub child_created_at: u64,
    pub descriptor_count: u64,
    pub descriptor: Value,
    /// The child's log, named in refusals when known.
    pub source_path: Option<String>,
}

/// One validated catalog entry: the rule is `format`'s, which native V4 admission applies.
pub(crate) type Entry = CatalogFact;

fn entry(fact: &Value) -> Option<Entry> {
    catalog_fact(fact)
}

/// The parent's catalog: every remembered payload valid, no child twice.
pub(crate) fn parent_catalog(catalogs: &[Value]) -> Result<Vec<Entry>, V3Reason> {
    let mut entries: Vec<Entry> = Vec::with_capacity(catalogs.len());
    for fact in catalogs {
        let entry = entry(fact).ok_or(V3Reason::CatalogFact)?;
        if entries.iter().any(|e| e.child_id == entry.child_id) {
            return Err(V3Reason::DuplicateChild(entry.child_id));
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// The catalog payloads to append for `children` missing from `parent`, in dsh's order
/// (creation time, then id); a child the parent already lists must agree with it.
pub(crate) fn complete_catalog(
    parent: &[Entry],
    children: &[ChildFact],
) -> Result<Vec<Value>, V3Reason> {
    let mut sorted: Vec<&ChildFact> = children.iter().collect();
    sorted.sort_by(|a, b| {
        (
            a.child_created_at,
            a.child_id.encode_utf16().collect::<Vec<_>>(),
        )
            .cmp(&(
                b.child_created_at,
                b.child_id.encode_utf16().collect::<Vec<_>>(),
            ))
    });
    let mut appended = Vec::new();
    for child in sorted {
        let subject = match &child.source_path {
            Some(path) => format!("Session {} (raw log: {path})", child.child_id),
            None => format!("Session {}", child.child_id),
        };
        let fact = derive_fact(child, &subject)?;
        match parent.iter().find(|e| e.child_id == child.child_id) {
            Some(known) => {
                let conflicts = known.child_created_at != child.child_created_at
                    || fact.as_ref().is_some_and(|f| {
                        f.get("mode").and_then(Value::as_str) != Some(known.mode.as_str())
                            || f.get("label").and_then(Value::as_str) != known.label.as_deref()
                    });
                if conflicts {
                    return Err(V3Reason::Child(format!(
                        "{subject} conflicts with its parent catalog"
                    )));
                }
            }
            None => appended.push(fact.unwrap_or_else(|| {
                json!({"version": 1, "childId": child.child_id,
                    "childCreatedAt": child.child_created_at, "mode": "unknown"})
            })),
        }
    }
    Ok(appended)
}

/// The version-0 fact a child with exactly one supported descriptor yields.
fn derive_fact(child: &ChildFact, subject: &str) -> Result<Option<Value>, V3Reason> {
    if child.descriptor_count != 1 {
        return Ok(None);
    }
    let Some(descriptor) = child.descriptor.as_object() else {
        return Ok(None);
    };
    let version = descriptor.get("version").and_then(Value::as_u64);
    if !matches!(version, Some(1..=3)) {
        return Ok(None);
    }
    if !descriptor.get("provider").is_some_and(Value::is_string) {
        return Err(V3Reason::Child(format!(
            "{subject} has an invalid subagent descriptor provider"
        )));
    }
    let mode = if version == Some(1) {
        "continuable".to_owned()
    } else {
        match descriptor.get("mode").and_then(Value::as_str) {
            Some(mode @ ("continuable" | "one-shot")) => mode.to_owned(),
            _ => {
                return Err(V3Reason::Child(format!(
                    "{subject} has an invalid subagent descriptor mode"
                )))
            }
        }
    };
    let mut fact = Map::new();
    fact.insert("version".into(), 0.into());
    fact.insert("childId".into(), child.child_id.clone().into());
    fact.insert("childCreatedAt".into(), child.child_created_at.into());
    fact.insert("mode".into(), mode.into());
    if let Some(label) = descriptor.get("label") {
        fact.insert("label".into(), label.clone());
    }
    let fact = Value::Object(fact);
    if entry(&fact).is_none() {
        return Err(V3Reason::CatalogFact);
    }
    Ok(Some(fact))
}
