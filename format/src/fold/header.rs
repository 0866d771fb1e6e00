//! The request-header fold's canonical form and equality (spec 8.2; L `request-header.ts`
//! @99c4b354, `callConfigEquals` of dsh's LLM package).

use serde_json::{Number, Value};

use crate::json::Extra;
use crate::payload::{CallConfig, EpochHeader};

/// `canonicalHeader`: `config` as written; `adapterDefaults` only when one of its flags is
/// `true`; `tools` only when non-empty; `system` (V2 only) only when non-empty. Unknown
/// members of the header are dropped.
///
/// "Non-empty" follows JavaScript's `length > 0`, so the `"{{tools}}"` placeholder of
/// normalized recordings counts as present, and an empty string does not.
pub fn canonical_header(header: &EpochHeader) -> EpochHeader {
    let flagged = |defaults: &&Value| {
        ["reasoningEffort", "maxTokens"]
            .iter()
            .any(|flag| defaults.get(flag) == Some(&Value::Bool(true)))
    };
    EpochHeader {
        config: header.config.clone(),
        adapter_defaults: header.adapter_defaults.as_ref().filter(flagged).cloned(),
        tools: header.tools.as_ref().filter(|t| has_length(t)).cloned(),
        system: header.system.as_ref().filter(|s| has_length(s)).cloned(),
        extra: Extra::new(),
    }
}

/// `headerEquals` over canonical headers: the configs are equal, both adapter flags are equal,
/// the systems are equal, and the tool lists have the same length with the schemas pairwise
/// equal by their JSON serialization, so the key order of a schema matters.
///
/// A tool list that is not an array (a `"{{tools}}"` placeholder) is compared whole, by its
/// serialization; dsh would throw on it.
pub fn headers_equal(a: &EpochHeader, b: &EpochHeader) -> bool {
    configs_equal(&a.config, &b.config)
        && flag(a, "reasoningEffort") == flag(b, "reasoningEffort")
        && flag(a, "maxTokens") == flag(b, "maxTokens")
        && a.system == b.system
        && tools_equal(a.tools.as_ref(), b.tools.as_ref())
}

/// `callConfigEquals`: every typed member, numbers by value (`1` equals `1.0`, as in
/// JavaScript), `stop` element-wise; unknown members do not count.
fn configs_equal(a: &CallConfig, b: &CallConfig) -> bool {
    a.provider == b.provider
        && a.model == b.model
        && a.reasoning_effort == b.reasoning_effort
        && numbers_equal(a.temperature.as_ref(), b.temperature.as_ref())
        && numbers_equal(a.max_tokens.as_ref(), b.max_tokens.as_ref())
        && a.stop == b.stop
}

/// The value of an `adapterDefaults` flag.
fn flag<'a>(header: &'a EpochHeader, name: &str) -> Option<&'a Value> {
    header.adapter_defaults.as_ref()?.get(name)
}

fn numbers_equal(a: Option<&Number>, b: Option<&Number>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a.is_none() && b.is_none(),
    }
}

fn tools_equal(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (tool_list(a), tool_list(b)) {
        (Some(a), Some(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_json(x, y)),
        _ => a.map(to_json) == b.map(to_json),
    }
}

/// The tools as a list: absent is empty; a placeholder is no list.
fn tool_list(tools: Option<&Value>) -> Option<&[Value]> {
    match tools {
        None => Some(&[]),
        Some(Value::Array(items)) => Some(items),
        Some(_) => None,
    }
}

fn same_json(a: &Value, b: &Value) -> bool {
    to_json(a) == to_json(b)
}

fn to_json(value: &Value) -> String {
    serde_json::to_string(value).expect("a JSON value with string keys serializes")
}

/// JavaScript's `value.length > 0` for the values a header holds.
fn has_length(value: &Value) -> bool {
    match value {
        Value::Array(items) => !items.is_empty(),
        Value::String(text) => !text.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn header(value: Value) -> EpochHeader {
        serde_json::from_value(value).unwrap()
    }

    fn canonical(value: Value) -> Value {
        serde_json::to_value(canonical_header(&header(value))).unwrap()
    }

    // Goal: the canonical form keeps exactly what  8.2 keeps. Method: headers with empty,
    // false-only and placeholder members, compared as JSON.
    #[test]
    fn canonical_form_drops_empty_members() {
        let config = json!({"provider": "p", "model": "m", "maxTokens": 5});
        let cases = [
            (
                json!({"config": config, "adapterDefaults": {}, "tools": [], "system": ""}),
                json!({"config": config}),
            ),
            (
                json!({"config": config, "adapterDefaults": {"maxTokens": false}, "x": 1}),
                json!({"config": config}),
            ),
            (
                json!({"config": config, "adapterDefaults": {"maxTokens": true}, "tools": "{{tools}}"}),
                json!({"config": config, "adapterDefaults": {"maxTokens": true}, "tools": "{{tools}}"}),
            ),
            (
                json!({"config": config, "tools": [{"name": "a"}], "system": "s"}),
                json!({"config": config, "tools": [{"name": "a"}], "system": "s"}),
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(canonical(input), expected);
        }
    }

    // Goal: `headerEquals` compares configs by value and tools by serialization. Method:
    // pairs that differ in one respect each.
    #[test]
    fn header_equality() {
        let base = json!({"config": {"provider": "p", "model": "m", "temperature": 1},
            "tools": [{"name": "a", "parameters": {}}]});
        let equal = |a: &Value, b: &Value| headers_equal(&header(a.clone()), &header(b.clone()));
        assert!(equal(&base, &base));
        let mut float = base.clone();
        float["config"]["temperature"] = json!(1.0);
        assert!(equal(&base, &float), "1 and 1.0 are the same number");
        let mut reordered = base.clone();
        reordered["tools"] = json!([{"parameters": {}, "name": "a"}]);
        assert!(!equal(&base, &reordered), "tool key order matters");
        let mut flagged = base.clone();
        flagged["adapterDefaults"] = json!({"reasoningEffort": true});
        assert!(!equal(&base, &flagged));
        let mut stopped = base.clone();
        stopped["config"]["stop"] = json!([]);
        assert!(
            !equal(&base, &stopped),
            "absent stop differs from an empty one"
        );
        let mut unknown = base.clone();
        unknown["config"]["seed"] = json!(7);
        assert!(
            equal(&base, &unknown),
            "unknown config members do not count"
        );
        let placeholder = json!({"config": base["config"], "tools": "{{tools}}"});
        assert!(equal(&placeholder, &placeholder));
        assert!(!equal(&placeholder, &base));
    }
}
