//! Checks on raw JSON payload members, worded as dsh's V0 validators word them.

use serde_json::{Map, Value};
use sessionlog_format::SAFE_INTEGER_MAX;

use super::V0Reason;

/// A JSON object payload or nested record.
pub(super) type Object = Map<String, Value>;

/// A payload refusal with `detail` as its whole text.
pub(super) fn payload(detail: impl Into<String>) -> V0Reason {
    V0Reason::Payload {
        detail: detail.into(),
    }
}

/// `value` as a JSON object, or `<label> must be a JSON object`.
pub(super) fn record<'a>(value: Option<&'a Value>, label: &str) -> Result<&'a Object, V0Reason> {
    match value {
        Some(Value::Object(object)) => Ok(object),
        _ => Err(payload(format!("{label} must be a JSON object"))),
    }
}

/// The mutable form of [`record`].
pub(super) fn record_mut<'a>(
    value: Option<&'a mut Value>,
    label: &str,
) -> Result<&'a mut Object, V0Reason> {
    match value {
        Some(Value::Object(object)) => Ok(object),
        _ => Err(payload(format!("{label} must be a JSON object"))),
    }
}

/// Every `required` member is present and nothing outside `required` and `optional` is. An
/// unexpected member is reported before a missing one, each in object order.
pub(super) fn exact_keys(
    object: &Object,
    required: &[&str],
    optional: &[&str],
    label: &str,
) -> Result<(), V0Reason> {
    let allowed = |key: &str| required.contains(&key) || optional.contains(&key);
    if let Some(key) = object.keys().find(|key| !allowed(key)) {
        return Err(payload(format!(
            "{label} has unexpected member {}",
            quote(key)
        )));
    }
    if let Some(key) = required.iter().find(|key| !object.contains_key(**key)) {
        return Err(payload(format!(
            "{label} lacks required member {}",
            quote(key)
        )));
    }
    Ok(())
}

/// A non-negative safe integer (JavaScript's view: `2.0` is the integer 2).
pub(super) fn count(value: Option<&Value>, label: &str) -> Result<u64, V0Reason> {
    as_count(value).ok_or_else(|| payload(format!("{label} must be a non-negative safe integer")))
}

/// A count that is not 0.
pub(super) fn positive(value: Option<&Value>, label: &str) -> Result<u64, V0Reason> {
    let n = count(value, label)?;
    if n == 0 {
        return Err(payload(format!("{label} must be positive")));
    }
    Ok(n)
}

/// `value` as a count, if it is one.
pub(super) fn as_count(value: Option<&Value>) -> Option<u64> {
    let number = match value {
        Some(Value::Number(number)) => number,
        _ => return None,
    };
    if let Some(n) = number.as_u64() {
        return (n <= SAFE_INTEGER_MAX).then_some(n);
    }
    let float = number.as_f64()?;
    let integral = float.fract() == 0.0 && float >= 0.0 && float <= SAFE_INTEGER_MAX as f64;
    // A negative zero is not a count in dsh either.
    (integral && !float.is_sign_negative()).then_some(float as u64)
}

/// A string, possibly empty.
pub(super) fn string(value: Option<&Value>, label: &str) -> Result<(), V0Reason> {
    match value {
        Some(Value::String(_)) => Ok(()),
        _ => Err(payload(format!("{label} must be a string"))),
    }
}

/// A string with at least one character.
pub(super) fn non_empty(value: Option<&Value>, label: &str) -> Result<(), V0Reason> {
    match value {
        Some(Value::String(text)) if !text.is_empty() => Ok(()),
        _ => Err(payload(format!("{label} must be a non-empty string"))),
    }
}

/// A boolean.
pub(super) fn boolean(value: Option<&Value>, label: &str) -> Result<(), V0Reason> {
    match value {
        Some(Value::Bool(_)) => Ok(()),
        _ => Err(payload(format!("{label} must be a boolean"))),
    }
}

/// One of the string literals in `allowed`.
pub(super) fn literal(
    value: Option<&Value>,
    allowed: &[&str],
    label: &str,
) -> Result<(), V0Reason> {
    match value.and_then(Value::as_str) {
        Some(text) if allowed.contains(&text) => Ok(()),
        _ => Err(payload(format!(
            "{label} must be one of {}",
            allowed.join(", ")
        ))),
    }
}

/// Exactly `true`.
pub(super) fn literal_true(value: Option<&Value>, label: &str) -> Result<(), V0Reason> {
    match value {
        Some(Value::Bool(true)) => Ok(()),
        _ => Err(payload(format!("{label} must be one of true"))),
    }
}

/// An array, each member checked by `check` with the label `<label>[i]`.
pub(super) fn array<'a>(
    value: Option<&'a Value>,
    label: &str,
    mut check: impl FnMut(&'a Value, &str) -> Result<(), V0Reason>,
) -> Result<&'a [Value], V0Reason> {
    let Some(Value::Array(items)) = value else {
        return Err(payload(format!("{label} must be an array")));
    };
    for (item_idx, item) in items.iter().enumerate() {
        check(item, &format!("{label}[{item_idx}]"))?;
    }
    Ok(items)
}

/// A seq earlier than `event_seq`.
pub(super) fn earlier_seq(
    value: Option<&Value>,
    event_seq: u64,
    label: &str,
) -> Result<(), V0Reason> {
    if count(value, label)? >= event_seq {
        return Err(payload(format!("{label} must identify an earlier event")));
    }
    Ok(())
}

/// `text` as JavaScript's `JSON.stringify` writes a string (serde_json escapes the same
/// characters: `"`, `\` and the control characters).
pub(super) fn quote(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    // Goal: counts follow JavaScript's safe-integer rule, floats with no fraction included.
    // Method: one value of each kind, accepted and refused.
    #[test]
    fn counts_are_safe_non_negative_integers() {
        assert_eq!(as_count(Some(&json!(3))), Some(3));
        assert_eq!(as_count(Some(&json!(3.0))), Some(3));
        assert_eq!(as_count(Some(&json!(-1))), None);
        assert_eq!(as_count(Some(&json!(1.5))), None);
        assert_eq!(as_count(Some(&json!(SAFE_INTEGER_MAX + 1))), None);
        assert_eq!(as_count(Some(&json!("1"))), None);
        assert_eq!(as_count(None), None);
    }

    // Goal: an unexpected member is named before a missing one, quoted as JSON.
    // Method: an object with both faults, then one with only a missing member.
    #[test]
    fn exact_keys_reports_unexpected_first() {
        let both = json!({"turn": 1, "x\"y": true});
        let both = both.as_object().expect("an object literal");
        let refusal = exact_keys(both, &["turn", "reason"], &[], "turn/end 4 data");
        assert_eq!(
            refusal.map_err(|r| r.to_string()),
            Err(r#"turn/end 4 data has unexpected member "x\"y""#.to_owned())
        );
        let missing = json!({"turn": 1});
        let missing = missing.as_object().expect("an object literal");
        let refusal = exact_keys(missing, &["turn", "reason"], &[], "turn/end 4 data");
        assert_eq!(
            refusal.map_err(|r| r.to_string()),
            Err(r#"turn/end 4 data lacks required member "reason""#.to_owned())
        );
    }
}
