//! Strict `{{name}}` rendering: only names matching `[a-z][a-z0-9_]*`, and every reference
//! must resolve to a defined value.

use std::collections::BTreeMap;

/// The variables a rendering reads: a registered name maps to its value, or to `None` when
/// the variable is registered but has no value in this assembly.
pub type Variables = BTreeMap<String, Option<String>>;

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// `{{` without a closing `}}`, or a name outside `[a-z][a-z0-9_]*`.
    #[error("malformed template reference {reference:?} at byte {offset_bytes}")]
    Malformed {
        reference: String,
        offset_bytes: usize,
    },
    /// The name is not a registered variable.
    #[error("unknown template variable {name:?}")]
    Unknown { name: String },
    /// The variable is registered but has no value in this assembly.
    #[error("template variable {name:?} is undefined")]
    Undefined { name: String },
}

/// Whether `name` matches `[a-z][a-z0-9_]*`.
pub fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Renders `template`: each `{{name}}` is replaced by its value. Lookups are by exact key
/// (own properties only: nothing is inherited), replaced values are not scanned again, and
/// the first bad reference fails the whole rendering.
pub fn render(template: &str, variables: &Variables) -> Result<String, RenderError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    let mut offset_bytes = 0;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            return Err(RenderError::Malformed {
                reference: rest[open..].chars().take(40).collect(),
                offset_bytes: offset_bytes + open,
            });
        };
        let name = &after[..close];
        if !is_variable_name(name) {
            return Err(RenderError::Malformed {
                reference: format!("{{{{{name}}}}}"),
                offset_bytes: offset_bytes + open,
            });
        }
        match variables.get(name) {
            None => return Err(RenderError::Unknown { name: name.into() }),
            Some(None) => return Err(RenderError::Undefined { name: name.into() }),
            Some(Some(value)) => out.push_str(value),
        }
        let consumed = open + 2 + close + 2;
        offset_bytes += consumed;
        rest = &rest[consumed..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn vars(pairs: &[(&str, Option<&str>)]) -> Variables {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
            .collect()
    }

    // Goal: a defined variable is substituted, and its value is not scanned again.
    // Method: a value that itself looks like a reference.
    #[test]
    fn substitutes_without_rescanning() {
        let v = vars(&[("model", Some("{{other}}")), ("cwd_2", Some("/w"))]);
        let out = render("You are {{model}} in {{cwd_2}}.", &v);
        assert_eq!(out, Ok("You are {{other}} in /w.".to_owned()));
        assert_eq!(
            render("no refs } { }}", &v),
            Ok("no refs } { }}".to_owned())
        );
    }

    // Goal: unknown, undefined and malformed references fail fast with their own error.
    // Method: one template per failure.
    #[test]
    fn bad_references_fail() {
        let v = vars(&[("model", None)]);
        assert_eq!(
            render("{{model}}", &v),
            Err(RenderError::Undefined {
                name: "model".into()
            })
        );
        assert_eq!(
            render("{{cwd}}", &v),
            Err(RenderError::Unknown { name: "cwd".into() })
        );
        for bad in [
            "{{Model}}",
            "{{ model }}",
            "{{1a}}",
            "{{a-b}}",
            "{{}}",
            "x {{model",
        ] {
            assert!(
                matches!(render(bad, &v), Err(RenderError::Malformed { .. })),
                "{bad} is malformed"
            );
        }
    }

    // Goal: lookups are own-property only: names an object would inherit in JavaScript are
    // unknown unless registered. Method: `constructor` and `to_string`.
    #[test]
    fn inherited_names_are_unknown() {
        let v = vars(&[]);
        for name in ["constructor", "to_string", "has_own_property"] {
            let template = format!("{{{{{name}}}}}");
            assert_eq!(
                render(&template, &v),
                Err(RenderError::Unknown { name: name.into() })
            );
        }
    }

    // Goal: the name grammar is exactly `[a-z][a-z0-9_]*`. Method: edge names.
    #[test]
    fn name_grammar() {
        for good in ["a", "a1", "a_b_2", "model"] {
            assert!(is_variable_name(good), "{good}");
        }
        for bad in ["", "_a", "1a", "aB", "a-b", "a b", "\u{e9}"] {
            assert!(!is_variable_name(bad), "{bad}");
        }
    }
}
