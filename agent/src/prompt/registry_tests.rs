//! Tests of the prompt assembly registry: layers, shadowing, complete sections, order,
//! rendering, membership snapshots and suppression.

use std::cell::Cell;
use std::rc::Rc;

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

fn text(value: &str) -> impl Fn(&Provide<'_>) -> String + 'static {
    let value = value.to_owned();
    move |_| value.clone()
}

fn tool(name: &str) -> ToolSchema {
    ToolSchema {
        name: name.to_owned(),
        schema: json!({ "name": name, "parameters": {} }),
    }
}

fn scope(name: &str) -> Layer {
    Layer::Scope(name.to_owned())
}

fn ctx_chain(scopes: &[&str]) -> AssemblyContext {
    AssemblyContext {
        agent: scopes.last().map_or("", |s| s).to_owned(),
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        ..AssemblyContext::default()
    }
}

fn section_names(assembly: &Assembly) -> Vec<&str> {
    assembly.sections.iter().map(|s| s.name.as_str()).collect()
}

// Goal: a duplicate name in one layer is refused; the same name in another layer or of
// another kind is not; register and release each notify a change. Method: registrations.
#[test]
fn duplicates_in_one_layer_are_refused() {
    let registry = PromptRegistry::new();
    let first = registry.register(Layer::Global, Item::section("persona", 0, text("a")));
    assert!(first.is_ok());
    let again = registry.register(Layer::Global, Item::section("persona", 5, text("b")));
    assert_eq!(
        again,
        Err(RegistryError::Duplicate {
            kind: ItemKind::Section,
            layer: Layer::Global,
            name: "persona".into()
        })
    );
    assert!(registry
        .register(scope("a"), Item::section("persona", 0, text("c")))
        .is_ok());
    assert!(registry
        .register(Layer::Global, Item::context("persona", 0, text("d")))
        .is_ok());
    assert!(matches!(
        registry.register(Layer::Global, Item::variable("", |_| None)),
        Err(RegistryError::EmptyName { .. })
    ));
    let registration = first.unwrap();
    assert!(registry.release(&registration));
    assert!(
        !registry.release(&registration),
        "a second release is a no-op"
    );
    let changes = registry.changes();
    assert_eq!(changes.len(), 4);
    assert!(!changes[3].registered);
    assert_eq!(changes[3].name, "persona");
    assert!(registry
        .register(Layer::Global, Item::section("persona", 0, text("e")))
        .is_ok());
}

// Goal: global, then the farthest ancestor, then the nearest scope; the nearest wins by name
// and a shadowed provider never runs. Method: count provider calls per layer.
#[test]
fn nearest_scope_wins_and_shadowed_providers_never_run() {
    let registry = PromptRegistry::new();
    let calls = Rc::new(Cell::new(0));
    let counted = |value: &str| {
        let calls = Rc::clone(&calls);
        let value = value.to_owned();
        move |_: &Provide<'_>| {
            calls.set(calls.get() + 1);
            value.clone()
        }
    };
    registry
        .register(
            Layer::Global,
            Item::section("persona", 0, counted("global")),
        )
        .unwrap();
    registry
        .register(scope("root"), Item::section("persona", 0, counted("root")))
        .unwrap();
    registry
        .register(
            scope("child"),
            Item::section("persona", 0, counted("child")),
        )
        .unwrap();
    registry
        .register(scope("root"), Item::section("root-only", 1, text("r")))
        .unwrap();
    registry
        .register(scope("other"), Item::section("elsewhere", 1, text("x")))
        .unwrap();
    let assembly = registry.assemble(&ctx_chain(&["root", "child"])).unwrap();
    assert_eq!(assembly.render_prompt(), Ok("child\n\nr".to_owned()));
    assert_eq!(calls.get(), 1, "only the effective provider ran");
    let assembly = registry.assemble(&ctx_chain(&["root"])).unwrap();
    assert_eq!(assembly.render_prompt(), Ok("root\n\nr".to_owned()));
    let assembly = registry
        .assemble(&AssemblyContext::agent("nobody"))
        .unwrap();
    assert_eq!(assembly.render_prompt(), Ok("global".to_owned()));
}

// Goal: sections sort by order, then by name in code-unit order; empty ones are dropped and
// the rest joined by a blank line; variables render strictly. Method: mixed sections.
#[test]
fn order_render_and_variables() {
    let registry = PromptRegistry::new();
    registry
        .register(Layer::Global, Item::section("b", 10, text("B {{model}}")))
        .unwrap();
    registry
        .register(Layer::Global, Item::section("a", 10, text("A")))
        .unwrap();
    registry
        .register(Layer::Global, Item::section("identity", -100, text("I")))
        .unwrap();
    registry
        .register(Layer::Global, Item::section("plan", 5, text("")))
        .unwrap();
    registry
        .register(
            Layer::Global,
            Item::variable("model", |p| Some(p.ctx.agent.clone())),
        )
        .unwrap();
    let assembly = registry.assemble(&AssemblyContext::agent("flash")).unwrap();
    assert_eq!(section_names(&assembly), vec!["identity", "plan", "a", "b"]);
    assert_eq!(assembly.render_prompt(), Ok("I\n\nA\n\nB flash".to_owned()));
    registry
        .register(Layer::Global, Item::variable("cwd", |_| None))
        .unwrap();
    registry
        .register(Layer::Global, Item::section("c", 20, text("{{cwd}}")))
        .unwrap();
    let assembly = registry.assemble(&AssemblyContext::agent("flash")).unwrap();
    assert_eq!(
        assembly.render_prompt(),
        Err(RenderError::Undefined { name: "cwd".into() })
    );
}

// Goal: a complete section does not skip the waterfall, is restored as the only section
// after it, and two effective complete sections fail; a shadowed one does not count.
// Method: a waterfall that records its run and adds a section.
#[test]
fn complete_sections() {
    let registry = PromptRegistry::new();
    registry
        .register(Layer::Global, Item::section("persona", 0, text("P")))
        .unwrap();
    registry
        .register(
            Layer::Global,
            Item::complete_section("only", 3, text("ONLY")),
        )
        .unwrap();
    registry
        .register(Layer::Global, Item::variable("v", |_| Some("x".into())))
        .unwrap();
    let ran = Cell::new(false);
    let assembly = registry
        .assemble_with(&AssemblyContext::agent("a"), |mut assembly| {
            ran.set(true);
            assert_eq!(assembly.variables.get("v"), Some(&Some("x".into())));
            assembly.sections.push(AssembledItem {
                name: "extra".into(),
                order: 1,
                text: "E".into(),
            });
            assembly
        })
        .unwrap();
    assert!(ran.get(), "the waterfall still runs");
    assert_eq!(section_names(&assembly), vec!["only"]);
    assert_eq!(assembly.render_prompt(), Ok("ONLY".to_owned()));
    registry
        .register(
            scope("a"),
            Item::complete_section("only", 3, text("SCOPED")),
        )
        .unwrap();
    let assembly = registry.assemble(&AssemblyContext::agent("a")).unwrap();
    assert_eq!(
        assembly.render_prompt(),
        Ok("SCOPED".to_owned()),
        "shadowed, not two"
    );
    registry
        .register(
            Layer::Global,
            Item::complete_section("second", 4, text("S")),
        )
        .unwrap();
    assert_eq!(
        registry.assemble(&AssemblyContext::agent("a")),
        Err(AssemblyError::TwoComplete {
            first: "only".into(),
            second: "second".into()
        })
    );
}

// Goal: tool-provider membership is snapshotted (a provider registered during evaluation
// joins the next assembly) while variables iterate live (a variable registered by an earlier
// variable provider is evaluated in the same assembly). Method: self-registering providers.
#[test]
fn membership_snapshot_and_live_variables() {
    let registry = PromptRegistry::new();
    registry
        .register(
            Layer::Global,
            Item::tools("first", |p| {
                let late = Item::tools("late", |_| vec![tool("late_tool")]);
                let _ = p.registry.register(Layer::Global, late);
                vec![tool("b_tool"), tool("a_tool")]
            }),
        )
        .unwrap();
    registry
        .register(
            Layer::Global,
            Item::variable("early", |p| {
                let late = Item::variable("late", |_| Some("L".into()));
                let _ = p.registry.register(Layer::Global, late);
                Some("E".into())
            }),
        )
        .unwrap();
    let ctx = AssemblyContext::agent("a");
    let first = registry.assemble(&ctx).unwrap();
    let names: Vec<&str> = first.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["a_tool", "b_tool"]);
    assert_eq!(first.variables.get("late"), Some(&Some("L".into())));
    let second = registry.assemble(&ctx).unwrap();
    let names: Vec<&str> = second.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["a_tool", "b_tool", "late_tool"]);
}

// Goal: tools are restricted by scope, ordered by the configured order, and a duplicate tool
// fails. Method: an allow list and a toolOrder naming a tool the scope cannot see.
#[test]
fn tool_restriction_and_order() {
    let registry = PromptRegistry::new();
    registry
        .register(
            Layer::Global,
            Item::tools("core", |_| vec![tool("read"), tool("write"), tool("bash")]),
        )
        .unwrap();
    let mut ctx = AssemblyContext::agent("a");
    ctx.allowed_tools = Some(["read", "bash"].iter().map(|s| (*s).to_owned()).collect());
    ctx.tool_order = Some(vec![
        "write".into(),
        "bash".into(),
        "<unlisted-tools>".into(),
    ]);
    let assembly = registry.assemble(&ctx).unwrap();
    let names: Vec<&str> = assembly.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["bash", "read"]);
    ctx.tool_order = Some(vec!["nope".into(), "<unlisted-tools>".into()]);
    assert!(matches!(
        registry.assemble(&ctx),
        Err(AssemblyError::ToolOrder(ToolOrderError::Unknown { .. }))
    ));
    registry
        .register(Layer::Global, Item::tools("again", |_| vec![tool("read")]))
        .unwrap();
    ctx.tool_order = None;
    assert_eq!(
        registry.assemble(&ctx),
        Err(AssemblyError::DuplicateTool {
            name: "read".into()
        })
    );
}

// Goal: suppressors remove runtime contexts, also when the waterfall puts one back.
// Method: a waterfall that re-adds the suppressed context and clears the set.
#[test]
fn suppression_is_applied_after_the_waterfall() {
    let registry = PromptRegistry::new();
    registry
        .register(Layer::Global, Item::context("sandbox", 10, text("S")))
        .unwrap();
    registry
        .register(Layer::Global, Item::context("cwd", 5, text("C")))
        .unwrap();
    registry
        .register(
            Layer::Global,
            Item::suppressor("quiet", |_| vec!["sandbox".into()]),
        )
        .unwrap();
    let assembly = registry
        .assemble_with(&AssemblyContext::agent("a"), |mut assembly| {
            assert_eq!(
                assembly.contexts.len(),
                1,
                "suppressed before the waterfall"
            );
            assembly.suppressed.clear();
            assembly.contexts.push(AssembledItem {
                name: "sandbox".into(),
                order: 10,
                text: "S".into(),
            });
            assembly
        })
        .unwrap();
    assert_eq!(
        assembly.render_contexts(),
        Ok(vec![("cwd".to_owned(), "C".to_owned())])
    );
}
