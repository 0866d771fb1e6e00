//! The prompt assembly registry: sections, runtime contexts, variables, tool-schema providers
//! and runtime-context suppressors in scoped layers, assembled once per step.
//!
//! Layers apply global first, then each scope from the farthest ancestor to the nearest; by
//! name (within one kind) the nearest wins. The effective items are chosen before any provider
//! runs, so a shadowed provider is never evaluated. Providers may register or release items
//! while they run: tool-provider membership is snapshotted before the first tool provider runs
//! (a provider registered meanwhile joins the next assembly), while variables are iterated
//! live (a variable registered by an earlier variable provider is evaluated in the same
//! assembly). Every assembly builds fresh containers and owns its tool schemas.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::rc::Rc;

use super::render::{render, RenderError, Variables};
use super::tools::{code_unit_cmp, order_tools, ToolOrderError, ToolSchema};

/// Most variables one assembly evaluates; providers that keep registering new ones fail.
pub const ASSEMBLY_VARIABLES_MAX: usize = 4096;

/// Where an item is registered.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layer {
    Global,
    /// A scope, named by its agent.
    Scope(String),
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layer::Global => f.write_str("global"),
            Layer::Scope(name) => write!(f, "scope {name}"),
        }
    }
}

/// What an assembly is for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AssemblyContext {
    /// The agent; it is also the nearest scope.
    pub agent: String,
    /// The scope chain from the farthest ancestor to the nearest scope.
    pub scopes: Vec<String>,
    /// The tools this scope may see (`None`: every tool). Names outside it stay known.
    pub allowed_tools: Option<BTreeSet<String>>,
    /// An explicit tool order with one `<unlisted-tools>` marker.
    pub tool_order: Option<Vec<String>>,
}

impl AssemblyContext {
    /// A context whose agent is its own single scope.
    pub fn agent(agent: &str) -> AssemblyContext {
        AssemblyContext {
            agent: agent.to_owned(),
            scopes: vec![agent.to_owned()],
            ..AssemblyContext::default()
        }
    }

    /// The precedence of `layer` (higher wins), or `None` when it does not apply.
    fn rank(&self, layer: &Layer) -> Option<usize> {
        match layer {
            Layer::Global => Some(0),
            Layer::Scope(name) => self.scopes.iter().rposition(|s| s == name).map(|i| i + 1),
        }
    }
}

/// What a provider sees: the assembly context and the registry (to register or release).
pub struct Provide<'a> {
    pub ctx: &'a AssemblyContext,
    pub registry: &'a PromptRegistry,
}

pub type TextFn = Rc<dyn Fn(&Provide<'_>) -> String>;
pub type VariableFn = Rc<dyn Fn(&Provide<'_>) -> Option<String>>;
pub type ToolsFn = Rc<dyn Fn(&Provide<'_>) -> Vec<ToolSchema>>;
/// Returns the names of the runtime contexts to suppress.
pub type SuppressFn = Rc<dyn Fn(&Provide<'_>) -> Vec<String>>;

/// One registrable item.
#[derive(Clone)]
pub enum Item {
    /// A system-prompt section; `complete: true` makes it the whole prompt.
    Section {
        name: String,
        order: i64,
        complete: bool,
        text: TextFn,
    },
    /// A runtime-context section.
    Context {
        name: String,
        order: i64,
        text: TextFn,
    },
    Variable {
        name: String,
        value: VariableFn,
    },
    ToolProvider {
        name: String,
        tools: ToolsFn,
    },
    Suppressor {
        name: String,
        suppress: SuppressFn,
    },
}

/// The kind of an [`Item`]; names are unique per kind and layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ItemKind {
    Section,
    Context,
    Variable,
    ToolProvider,
    Suppressor,
}

impl Item {
    pub fn section(
        name: &str,
        order: i64,
        text: impl Fn(&Provide<'_>) -> String + 'static,
    ) -> Item {
        Item::Section {
            name: name.to_owned(),
            order,
            complete: false,
            text: Rc::new(text),
        }
    }

    pub fn complete_section(
        name: &str,
        order: i64,
        text: impl Fn(&Provide<'_>) -> String + 'static,
    ) -> Item {
        Item::Section {
            name: name.to_owned(),
            order,
            complete: true,
            text: Rc::new(text),
        }
    }

    pub fn context(
        name: &str,
        order: i64,
        text: impl Fn(&Provide<'_>) -> String + 'static,
    ) -> Item {
        Item::Context {
            name: name.to_owned(),
            order,
            text: Rc::new(text),
        }
    }

    pub fn variable(name: &str, value: impl Fn(&Provide<'_>) -> Option<String> + 'static) -> Item {
        Item::Variable {
            name: name.to_owned(),
            value: Rc::new(value),
        }
    }

    pub fn tools(name: &str, tools: impl Fn(&Provide<'_>) -> Vec<ToolSchema> + 'static) -> Item {
        Item::ToolProvider {
            name: name.to_owned(),
            tools: Rc::new(tools),
        }
    }

    pub fn suppressor(
        name: &str,
        suppress: impl Fn(&Provide<'_>) -> Vec<String> + 'static,
    ) -> Item {
        Item::Suppressor {
            name: name.to_owned(),
            suppress: Rc::new(suppress),
        }
    }

    pub fn kind(&self) -> ItemKind {
        match self {
            Item::Section { .. } => ItemKind::Section,
            Item::Context { .. } => ItemKind::Context,
            Item::Variable { .. } => ItemKind::Variable,
            Item::ToolProvider { .. } => ItemKind::ToolProvider,
            Item::Suppressor { .. } => ItemKind::Suppressor,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Item::Section { name, .. }
            | Item::Context { name, .. }
            | Item::Variable { name, .. }
            | Item::ToolProvider { name, .. }
            | Item::Suppressor { name, .. } => name,
        }
    }
}

/// A registration, to release later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    id: u64,
    pub kind: ItemKind,
    pub layer: Layer,
    pub name: String,
}

/// A `system-prompt/change` notification: an item was registered or released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptChange {
    pub registered: bool,
    pub kind: ItemKind,
    pub layer: Layer,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    #[error("{layer} already has a {kind:?} named {name:?}")]
    Duplicate {
        kind: ItemKind,
        layer: Layer,
        name: String,
    },
    #[error("a {kind:?} needs a non-empty name")]
    EmptyName { kind: ItemKind },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AssemblyError {
    #[error("two complete sections are effective: {first:?} and {second:?}")]
    TwoComplete { first: String, second: String },
    #[error("two tool providers supply the tool {name:?}")]
    DuplicateTool { name: String },
    #[error(transparent)]
    ToolOrder(#[from] ToolOrderError),
    #[error("variable providers registered more than {max} variables in one assembly")]
    TooManyVariables { max: usize },
}

/// An evaluated section or runtime context, not yet rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssembledItem {
    pub name: String,
    pub order: i64,
    pub text: String,
}

/// One step's assembly: what the waterfall may change, and what the prompt and the runtime
/// context are rendered from.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembly {
    pub sections: Vec<AssembledItem>,
    pub contexts: Vec<AssembledItem>,
    pub tools: Vec<ToolSchema>,
    pub variables: Variables,
    /// Runtime contexts the suppressors removed.
    pub suppressed: BTreeSet<String>,
    /// The effective complete section as evaluated, restored after the waterfall.
    complete: Option<AssembledItem>,
}

struct Entry {
    id: u64,
    layer: Layer,
    item: Item,
}

/// The registry of one prompt owner. Single-threaded: providers run on the caller's thread
/// and may call back into the registry.
#[derive(Default)]
pub struct PromptRegistry {
    entries: RefCell<Vec<Entry>>,
    next_id: Cell<u64>,
    changes: RefCell<Vec<PromptChange>>,
}

impl fmt::Debug for PromptRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PromptRegistry")
            .field("items", &self.entries.borrow().len())
            .finish_non_exhaustive()
    }
}

impl PromptRegistry {
    pub fn new() -> PromptRegistry {
        PromptRegistry::default()
    }

    /// Registers `item` in `layer`; a second item of the same kind and name in the same layer
    /// is refused.
    pub fn register(&self, layer: Layer, item: Item) -> Result<Registration, RegistryError> {
        let kind = item.kind();
        let name = item.name().to_owned();
        if name.is_empty() {
            return Err(RegistryError::EmptyName { kind });
        }
        let mut entries = self.entries.borrow_mut();
        let taken = entries
            .iter()
            .any(|e| e.layer == layer && e.item.kind() == kind && e.item.name() == name);
        if taken {
            return Err(RegistryError::Duplicate { kind, layer, name });
        }
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        entries.push(Entry {
            id,
            layer: layer.clone(),
            item,
        });
        drop(entries);
        self.notify(true, kind, &layer, &name);
        Ok(Registration {
            id,
            kind,
            layer,
            name,
        })
    }

    /// Releases a registration; `false` when it was already released.
    pub fn release(&self, registration: &Registration) -> bool {
        let mut entries = self.entries.borrow_mut();
        let Some(idx) = entries.iter().position(|e| e.id == registration.id) else {
            return false;
        };
        entries.remove(idx);
        drop(entries);
        let Registration {
            kind, layer, name, ..
        } = registration;
        self.notify(false, *kind, layer, name);
        true
    }

    /// Every `system-prompt/change` so far, oldest first.
    pub fn changes(&self) -> Vec<PromptChange> {
        self.changes.borrow().clone()
    }

    fn notify(&self, registered: bool, kind: ItemKind, layer: &Layer, name: &str) {
        self.changes.borrow_mut().push(PromptChange {
            registered,
            kind,
            layer: layer.clone(),
            name: name.to_owned(),
        });
    }

    /// The effective items of `kind` for `ctx`, by name the nearest layer's, in registration
    /// order. Only cheap clones: no provider runs here.
    fn effective(&self, kind: ItemKind, ctx: &AssemblyContext) -> Vec<(u64, Item)> {
        let entries = self.entries.borrow();
        let mut winners: BTreeMap<&str, (usize, &Entry)> = BTreeMap::new();
        for entry in entries.iter().filter(|e| e.item.kind() == kind) {
            let Some(rank) = ctx.rank(&entry.layer) else {
                continue;
            };
            let name = entry.item.name();
            if winners.get(name).is_none_or(|(best, _)| rank > *best) {
                winners.insert(name, (rank, entry));
            }
        }
        let mut items: Vec<(u64, Item)> = winners
            .into_values()
            .map(|(_, e)| (e.id, e.item.clone()))
            .collect();
        items.sort_by_key(|(id, _)| *id);
        items
    }

    /// Assembles without a waterfall.
    pub fn assemble(&self, ctx: &AssemblyContext) -> Result<Assembly, AssemblyError> {
        self.assemble_with(ctx, |assembly| assembly)
    }

    /// Assembles, runs `waterfall` over the registry's output (its return value is
    /// authoritative), then applies the complete-section and suppression constraints again.
    pub fn assemble_with(
        &self,
        ctx: &AssemblyContext,
        waterfall: impl FnOnce(Assembly) -> Assembly,
    ) -> Result<Assembly, AssemblyError> {
        let provide = Provide {
            ctx,
            registry: self,
        };
        let variables = self.evaluate_variables(&provide)?;
        let tool_providers = self.effective(ItemKind::ToolProvider, ctx);
        let (sections, complete) = self.evaluate_sections(&provide)?;
        let contexts = self.evaluate_contexts(&provide);
        let suppressed = self.evaluate_suppressors(&provide);
        let tools = evaluate_tools(&provide, tool_providers)?;
        let assembly = Assembly {
            sections,
            contexts,
            tools,
            variables,
            suppressed,
            complete,
        };
        let complete = assembly.complete.clone();
        let suppressed = assembly.suppressed.clone();
        let mut assembly = waterfall(assembly.constrained());
        // The complete section and the suppressions survive whatever the waterfall did.
        assembly.complete = complete;
        assembly.suppressed.extend(suppressed);
        Ok(assembly.constrained())
    }

    fn evaluate_variables(&self, provide: &Provide<'_>) -> Result<Variables, AssemblyError> {
        let mut values = Variables::new();
        let mut done = BTreeSet::new();
        for _ in 0..=ASSEMBLY_VARIABLES_MAX {
            // Live iteration: the effective set is read again after every provider.
            let effective = self.effective(ItemKind::Variable, provide.ctx);
            let next = effective.into_iter().find(|(id, _)| !done.contains(id));
            let Some((id, item)) = next else {
                return Ok(values);
            };
            done.insert(id);
            if let Item::Variable { name, value } = item {
                values.insert(name, value(provide));
            }
        }
        Err(AssemblyError::TooManyVariables {
            max: ASSEMBLY_VARIABLES_MAX,
        })
    }

    /// Evaluates the effective sections; returns them and the effective complete section.
    fn evaluate_sections(
        &self,
        provide: &Provide<'_>,
    ) -> Result<(Vec<AssembledItem>, Option<AssembledItem>), AssemblyError> {
        let mut sections = Vec::new();
        let mut complete: Option<AssembledItem> = None;
        for (_, item) in self.effective(ItemKind::Section, provide.ctx) {
            let Item::Section {
                name,
                order,
                complete: is_complete,
                text,
            } = item
            else {
                continue;
            };
            let section = AssembledItem {
                name,
                order,
                text: text(provide),
            };
            if is_complete {
                if let Some(first) = &complete {
                    return Err(AssemblyError::TwoComplete {
                        first: first.name.clone(),
                        second: section.name,
                    });
                }
                complete = Some(section.clone());
            }
            sections.push(section);
        }
        Ok((sections, complete))
    }

    fn evaluate_contexts(&self, provide: &Provide<'_>) -> Vec<AssembledItem> {
        let mut contexts = Vec::new();
        for (_, item) in self.effective(ItemKind::Context, provide.ctx) {
            if let Item::Context { name, order, text } = item {
                let text = text(provide);
                contexts.push(AssembledItem { name, order, text });
            }
        }
        contexts
    }

    fn evaluate_suppressors(&self, provide: &Provide<'_>) -> BTreeSet<String> {
        let mut suppressed = BTreeSet::new();
        for (_, item) in self.effective(ItemKind::Suppressor, provide.ctx) {
            if let Item::Suppressor { suppress, .. } = item {
                suppressed.extend(suppress(provide));
            }
        }
        suppressed
    }
}

/// Runs the snapshotted tool providers; fails when two supply the same tool name.
fn evaluate_tools(
    provide: &Provide<'_>,
    providers: Vec<(u64, Item)>,
) -> Result<Vec<ToolSchema>, AssemblyError> {
    let mut all: Vec<ToolSchema> = Vec::new();
    let mut known = BTreeSet::new();
    for (_, item) in providers {
        if let Item::ToolProvider { tools, .. } = item {
            for tool in tools(provide) {
                if !known.insert(tool.name.clone()) {
                    return Err(AssemblyError::DuplicateTool { name: tool.name });
                }
                all.push(tool);
            }
        }
    }
    let visible: Vec<ToolSchema> = match &provide.ctx.allowed_tools {
        None => all,
        Some(allowed) => all
            .into_iter()
            .filter(|t| allowed.contains(&t.name))
            .collect(),
    };
    Ok(order_tools(
        visible,
        &known,
        provide.ctx.tool_order.as_deref(),
    )?)
}

fn sort_items(items: &mut [AssembledItem]) {
    items.sort_by(|a, b| {
        a.order
            .cmp(&b.order)
            .then_with(|| code_unit_cmp(&a.name, &b.name))
    });
}

/// Renders items strictly, drops the empty ones, and keeps `(name, text)`.
fn render_items(
    items: &[AssembledItem],
    variables: &Variables,
) -> Result<Vec<(String, String)>, RenderError> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let text = render(&item.text, variables)?;
        if !text.is_empty() {
            out.push((item.name.clone(), text));
        }
    }
    Ok(out)
}

impl Assembly {
    /// Applies the constraints: the complete section is the only section, suppressed contexts
    /// are gone, and items are sorted by order, then name in code-unit order.
    fn constrained(mut self) -> Assembly {
        if let Some(complete) = &self.complete {
            self.sections = vec![complete.clone()];
        }
        let suppressed = &self.suppressed;
        self.contexts.retain(|c| !suppressed.contains(&c.name));
        sort_items(&mut self.sections);
        sort_items(&mut self.contexts);
        self
    }

    /// The effective complete section, if one is registered.
    pub fn complete(&self) -> Option<&AssembledItem> {
        self.complete.as_ref()
    }

    /// `renderPrompt`: the sections rendered strictly, empty ones dropped, joined by a blank
    /// line.
    pub fn render_prompt(&self) -> Result<String, RenderError> {
        let sections = render_items(&self.sections, &self.variables)?;
        let texts: Vec<String> = sections.into_iter().map(|(_, text)| text).collect();
        Ok(texts.join("\n\n"))
    }

    /// The runtime contexts rendered strictly, empty ones dropped, as `(name, text)`.
    pub fn render_contexts(&self) -> Result<Vec<(String, String)>, RenderError> {
        render_items(&self.contexts, &self.variables)
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
