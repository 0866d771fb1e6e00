//! Step plans: what a step will hold, decided before any event is built, and feature gaps.

use crate::surface::NodeKind;

use super::Generator;

/// Steps since each optional feature last happened. A feature is forced once its gap
/// reaches a maximum, so that every kind of event appears within a few thousand events.
#[derive(Debug, Clone, Default)]
pub(super) struct Gaps {
    pub(super) retry: u64,
    pub(super) head_rewrite: u64,
    pub(super) history_append: u64,
    pub(super) route: u64,
    pub(super) tools: u64,
    pub(super) prune: u64,
    pub(super) compaction: u64,
}

/// Everything one step will hold, decided before any event is built so that its size is
/// known: a step that would not fit the remaining budget is shrunk or skipped.
#[derive(Debug, Clone, Default)]
pub(super) struct StepPlan {
    /// The session's first step: the system head and the title.
    pub(super) head: bool,
    pub(super) title: bool,
    /// The turn's first step: the user prompt.
    pub(super) prompt: bool,
    pub(super) runtime: bool,
    pub(super) steer: bool,
    /// A tool result to prune (its seq).
    pub(super) prune: Option<u64>,
    /// Later non-empty system nodes to clear before the head rewrite.
    pub(super) empties: Vec<u64>,
    pub(super) head_rewrite: bool,
    pub(super) history_append: bool,
    pub(super) tools_change: bool,
    /// V4: the tool change is announced by a `developer/message` bound to its header.
    pub(super) developer: bool,
    pub(super) route_change: bool,
    /// Derived by [`Generator::resolve`].
    pub(super) header: Option<&'static str>,
    pub(super) starts_series: bool,
    pub(super) context: bool,
    pub(super) retry: bool,
    pub(super) tool_calls: u64,
    /// V2: the head and its rewrites change the prompt of the next request header and write
    /// no event of their own.
    pub(super) prompt_in_header: bool,
}

impl StepPlan {
    /// The number of events the step holds.
    pub(super) fn size(&self) -> u64 {
        let system_events = !self.prompt_in_header;
        let flags = [
            self.head && system_events,
            self.title,
            self.prompt,
            self.runtime,
            self.steer,
            self.head_rewrite && system_events,
            self.history_append,
            self.header.is_some(),
            self.developer,
            self.context,
        ];
        let flagged = flags.iter().filter(|flag| **flag).count() as u64;
        let prune = 2 * u64::from(self.prune.is_some());
        let retry = 3 * u64::from(self.retry);
        // step/start, assistant/message and step/end, then the optional parts.
        3 + flagged + self.empties.len() as u64 + prune + retry + 2 * self.tool_calls
    }

    /// The smallest step with the same obligations: head and prompt stay, options go.
    pub(super) fn minimal(&self) -> StepPlan {
        StepPlan {
            head: self.head,
            prompt: self.prompt,
            prompt_in_header: self.prompt_in_header,
            ..StepPlan::default()
        }
    }
}

impl Generator {
    /// Decides what the next step holds.
    pub(super) fn plan_step(&mut self) -> StepPlan {
        let session_first = self.head.is_none();
        let turn_first = self.step == 0;
        let mut plan = StepPlan {
            head: session_first,
            title: session_first,
            prompt: turn_first,
            runtime: session_first || (turn_first && self.runtime_due),
            prompt_in_header: !self.prompt_on_surface(),
            ..StepPlan::default()
        };
        if !session_first {
            self.plan_options(&mut plan);
        }
        plan.retry = self.gaps.retry >= 50 || self.rng.permille(30);
        // The step being planned is `self.step + 1`; the turn's last step calls no tools.
        plan.tool_calls = if self.step + 1 < self.turn_steps {
            match self.rng.range(0, 19) {
                0..=11 => 1,
                12..=16 => 2,
                _ => 3,
            }
        } else {
            0
        };
        self.resolve(plan)
    }

    /// The optional parts of a step after the session's first.
    fn plan_options(&mut self, plan: &mut StepPlan) {
        plan.steer = !plan.prompt && self.rng.permille(25);
        if self.in_history {
            plan.history_append = self.gaps.history_append >= 12 || self.rng.permille(60);
        } else if self.gaps.head_rewrite >= 60 || self.rng.permille(12) {
            plan.head_rewrite = true;
            plan.empties = self.surface[1..]
                .iter()
                .filter(|node| node.kind == NodeKind::System && !node.blank)
                .map(|node| node.seq)
                .collect();
        }
        let route_gap_max = if self.in_history { 30 } else { 70 };
        // A V2 route has no system-prompt update mode to change.
        plan.route_change = self.prompt_on_surface()
            && !plan.history_append
            && !plan.head_rewrite
            && self.gaps.route >= 10
            && (self.gaps.route >= route_gap_max || self.rng.permille(8));
        plan.tools_change = self.gaps.tools >= 100 || self.rng.permille(8);
        if self.gaps.prune >= 60 || self.rng.permille(20) {
            plan.prune = self.prune_target();
        }
    }

    /// Derives the request header and context a plan needs (spec 7.5 rule 5, 8.3).
    pub(super) fn resolve(&self, mut plan: StepPlan) -> StepPlan {
        let series = self.need_series || plan.head_rewrite || plan.prune.is_some();
        plan.header = if !self.header_logged {
            Some("initial")
        } else if plan.tools_change {
            Some("change")
        } else if series {
            Some("series")
        } else {
            None
        };
        plan.starts_series = self.header_logged && plan.tools_change && series;
        plan.developer = self.v4() && plan.header == Some("change");
        plan.context = !self.context_logged || plan.route_change;
        plan
    }

    pub(super) fn note_gaps(&mut self, plan: &StepPlan) {
        let next = |happened: bool, gap: u64| if happened { 0 } else { gap + 1 };
        let gaps = &mut self.gaps;
        gaps.retry = next(plan.retry, gaps.retry);
        gaps.route = next(plan.route_change, gaps.route);
        gaps.tools = next(plan.tools_change, gaps.tools);
        gaps.prune = next(plan.prune.is_some(), gaps.prune);
        gaps.compaction += 1;
        // These two count only the steps in which they could have happened.
        if self.in_history {
            gaps.history_append = next(plan.history_append, gaps.history_append);
        } else {
            gaps.head_rewrite = next(plan.head_rewrite, gaps.head_rewrite);
        }
    }
}
