//! Tool-schema order: code-unit order by default, or an explicit `toolOrder` with exactly one
//! `<unlisted-tools>` marker.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use serde_json::Value;

/// The marker in an explicit tool order where every unlisted visible tool goes.
pub const UNLISTED_TOOLS: &str = "<unlisted-tools>";

/// One tool schema, by name; `schema` is the whole JSON object a header carries.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSchema {
    pub name: String,
    pub schema: Value,
}

/// Why a configured tool order is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolOrderError {
    #[error("toolOrder must hold exactly one {UNLISTED_TOOLS} marker, found {found}")]
    Marker { found: usize },
    #[error("toolOrder names {name:?} twice")]
    Duplicate { name: String },
    #[error("toolOrder names the unknown tool {name:?}")]
    Unknown { name: String },
}

/// Compares two strings by UTF-16 code units, as JavaScript's default sort does: independent
/// of locale, and different from byte order for characters beyond U+FFFF.
pub fn code_unit_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Orders the visible tools. Without `order`, by name in code-unit order. With it: the listed
/// names in their configured place (a name that is known but not visible in this scope is
/// skipped), and the unlisted visible tools in code-unit order at the marker. `known` is every
/// tool name known before scope restriction; a configured name outside it fails.
pub fn order_tools(
    mut visible: Vec<ToolSchema>,
    known: &BTreeSet<String>,
    order: Option<&[String]>,
) -> Result<Vec<ToolSchema>, ToolOrderError> {
    visible.sort_by(|a, b| code_unit_cmp(&a.name, &b.name));
    let Some(order) = order else {
        return Ok(visible);
    };
    check_order(order, known)?;
    let listed: BTreeSet<&str> = order.iter().map(String::as_str).collect();
    let (unlisted, mut listed_tools): (Vec<ToolSchema>, Vec<ToolSchema>) = visible
        .into_iter()
        .partition(|t| !listed.contains(t.name.as_str()));
    let mut unlisted = Some(unlisted);
    let mut out = Vec::with_capacity(listed_tools.len() + order.len());
    for name in order {
        if name == UNLISTED_TOOLS {
            out.extend(unlisted.take().unwrap_or_default());
        } else if let Some(idx) = listed_tools.iter().position(|t| &t.name == name) {
            out.push(listed_tools.swap_remove(idx));
        }
    }
    debug_assert!(unlisted.is_none() && listed_tools.is_empty());
    Ok(out)
}

fn check_order(order: &[String], known: &BTreeSet<String>) -> Result<(), ToolOrderError> {
    let found = order.iter().filter(|n| *n == UNLISTED_TOOLS).count();
    if found != 1 {
        return Err(ToolOrderError::Marker { found });
    }
    let mut seen = BTreeSet::new();
    for name in order.iter().filter(|n| *n != UNLISTED_TOOLS) {
        if !seen.insert(name) {
            return Err(ToolOrderError::Duplicate { name: name.clone() });
        }
        if !known.contains(name) {
            return Err(ToolOrderError::Unknown { name: name.clone() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn tools(names: &[&str]) -> Vec<ToolSchema> {
        names
            .iter()
            .map(|n| ToolSchema {
                name: (*n).to_owned(),
                schema: json!({ "name": n }),
            })
            .collect()
    }

    fn names(tools: &[ToolSchema]) -> Vec<&str> {
        tools.iter().map(|t| t.name.as_str()).collect()
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    // Goal: the default order is code-unit order, not byte or locale order. Method: a name
    // beyond U+FFFF sorts before U+FF21 in UTF-16, after it in UTF-8; upper case before lower.
    #[test]
    fn default_order_is_code_units() {
        let emoji = "\u{1F600}";
        let wide = "\u{FF21}";
        let known = BTreeSet::new();
        let out = order_tools(tools(&["b", wide, "B", emoji, "a"]), &known, None).unwrap();
        assert_eq!(names(&out), vec!["B", "a", "b", emoji, wide]);
    }

    // Goal: an explicit order places listed names, puts unlisted tools sorted at the marker,
    // and skips known names absent from this scope. Method: one order, three tool sets.
    #[test]
    fn explicit_order_with_marker() {
        let known: BTreeSet<String> = strings(&["read", "write", "bash", "grep", "todo"])
            .into_iter()
            .collect();
        let order = strings(&["write", UNLISTED_TOOLS, "bash"]);
        let out = order_tools(
            tools(&["todo", "bash", "read", "write", "grep"]),
            &known,
            Some(&order),
        );
        assert_eq!(
            names(&out.unwrap()),
            vec!["write", "grep", "read", "todo", "bash"]
        );
        let restricted = order_tools(tools(&["read", "bash"]), &known, Some(&order)).unwrap();
        assert_eq!(names(&restricted), vec!["read", "bash"]);
    }

    // Goal: a bad configuration fails: zero or two markers, a duplicate, an unknown name.
    // Method: one order per failure.
    #[test]
    fn bad_orders_fail() {
        let known: BTreeSet<String> = strings(&["a", "b"]).into_iter().collect();
        let check = |order: &[&str]| order_tools(tools(&["a"]), &known, Some(&strings(order)));
        assert_eq!(check(&["a"]), Err(ToolOrderError::Marker { found: 0 }));
        assert_eq!(
            check(&[UNLISTED_TOOLS, "a", UNLISTED_TOOLS]),
            Err(ToolOrderError::Marker { found: 2 })
        );
        assert_eq!(
            check(&["a", UNLISTED_TOOLS, "a"]),
            Err(ToolOrderError::Duplicate { name: "a".into() })
        );
        assert_eq!(
            check(&["zzz", UNLISTED_TOOLS]),
            Err(ToolOrderError::Unknown { name: "zzz".into() })
        );
    }
}
