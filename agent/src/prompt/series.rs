//! Series detection: whether a request begins a new request series, so that the system prompt
//! is consolidated into node 0 and the header is logged again.

use super::tools::ToolSchema;

/// What decides a series start. A provider or model swap is deliberately absent: on its own it
/// is not a series start (the header records it, and the cache misses anyway).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeriesInputs {
    /// The `agent/pre-step` decision declares `startsRequestSeries`.
    pub declared: bool,
    /// The surface replace generation at the last request of this loop instance; `None`
    /// before its first request (a resume continues the series).
    pub request_generation: Option<u64>,
    /// The surface replace generation now.
    pub surface_generation: u64,
    /// The visible tool-schema set changed since the last request.
    pub tools_changed: bool,
    /// The route supports dynamic tool updates (`toolUpdate`).
    pub tool_update: bool,
}

/// `startsSeries`: declared by the pre-step decision, or the replace generation moved since
/// the last request (a compaction or any other replacement), or the visible tool set changed
/// on a route without tool-update support.
pub fn starts_series(inputs: SeriesInputs) -> bool {
    let generation_moved = inputs
        .request_generation
        .is_some_and(|g| g != inputs.surface_generation);
    inputs.declared || generation_moved || (inputs.tools_changed && !inputs.tool_update)
}

/// Whether the visible tool-schema set differs: by name and schema, ignoring order. Without a
/// previous set (no request yet) nothing changed.
pub fn tool_set_changed(previous: Option<&[ToolSchema]>, next: &[ToolSchema]) -> bool {
    let Some(previous) = previous else {
        return false;
    };
    let key = |tools: &[ToolSchema]| {
        let mut keys: Vec<(String, String)> = tools
            .iter()
            .map(|t| (t.name.clone(), t.schema.to_string()))
            .collect();
        keys.sort();
        keys
    };
    key(previous) != key(next)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(name: &str, description: &str) -> ToolSchema {
        ToolSchema {
            name: name.into(),
            schema: json!({ "name": name, "description": description }),
        }
    }

    // Goal: each trigger alone starts a series, and nothing else does. Method: one input at a
    // time from the all-quiet state.
    #[test]
    fn each_trigger_starts_a_series() {
        let quiet = SeriesInputs {
            request_generation: Some(3),
            surface_generation: 3,
            ..SeriesInputs::default()
        };
        assert!(!starts_series(quiet));
        assert!(starts_series(SeriesInputs {
            declared: true,
            ..quiet
        }));
        assert!(starts_series(SeriesInputs {
            surface_generation: 4,
            ..quiet
        }));
        assert!(starts_series(SeriesInputs {
            tools_changed: true,
            ..quiet
        }));
        assert!(
            !starts_series(SeriesInputs {
                tools_changed: true,
                tool_update: true,
                ..quiet
            }),
            "a route with tool updates keeps the series"
        );
        assert!(
            !starts_series(SeriesInputs {
                request_generation: None,
                surface_generation: 9,
                ..quiet
            }),
            "resume is series-continuing"
        );
    }

    // Goal: the tool set compares names and schemas, not order; no previous set is no change.
    // Method: reordered, changed and added tools.
    #[test]
    fn tool_set_changes() {
        let a = [tool("a", "x"), tool("b", "y")];
        assert!(!tool_set_changed(None, &a));
        assert!(!tool_set_changed(
            Some(&a),
            &[tool("b", "y"), tool("a", "x")]
        ));
        assert!(tool_set_changed(
            Some(&a),
            &[tool("a", "x"), tool("b", "z")]
        ));
        assert!(tool_set_changed(Some(&a[..1]), &a));
    }
}
