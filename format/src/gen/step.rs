//! The events of one step: system, user, request, retry, assistant and tool events.

use serde_json::{json, Number, Value};

use crate::event::{Event, EventData, EventType, SurfaceOp};
use crate::json::Extra;
use crate::message::{ContentBlock, Message, Source, TextBlock, ToolCallBlock, ToolResultBlock};
use crate::payload::{
    AssistantAttemptData, AssistantMessageData, CallConfig, DeveloperMessageData, EpochHeader,
    RequestContextData, RequestHeaderData, SystemMessageData, ToolCallData, ToolResultData,
};
use crate::stream::{StreamChunk, TokenUsage, UsageChunk};
use crate::surface::NodeKind;

use super::builders::source;
use super::plan::StepPlan;
use super::stream::{finish_chunk, raw};
use super::surface_model::{tokens_of, Live};
use super::text::{base62, prose};
use super::tools::{tool_use, ToolUse};
use super::{
    Generator, CWD, MODEL, PRESETS, PROVIDER, REQUEST_OVERHEAD_TOKENS, V2_PROMPT_NODE_SEQ,
};

const CONTEXT_WINDOW_TOKENS: u64 = 1_000_000;
const PROMPT_PLUGIN: &str = "@deepseek-ai/dsh-system-prompt";
const RETRY_POLICY_KEY: &str =
    r#"["normal",2,["EMPTY_RESPONSE","RATE_LIMIT","SERVER","TIMEOUT","TRANSPORT"],1,1,0]"#;
const EMPTY_RESPONSE: &str = "model returned a completed response with no content";

impl Generator {
    pub(super) fn build_step(&mut self, plan: StepPlan) -> Vec<Event> {
        let mut batch = Vec::with_capacity(usize::try_from(plan.size()).expect("a small count"));
        self.step += 1;
        self.advance(5, 50);
        self.push(&mut batch, EventData::StepStart(Box::new(self.step_ref())));
        if let Some(target) = plan.prune {
            self.push_prune(&mut batch, target);
        }
        self.push_system(&mut batch, &plan);
        self.push_user(&mut batch, &plan);
        self.push_request(&mut batch, &plan);
        if plan.retry {
            self.push_retry(&mut batch);
        }
        let uses = self.push_assistant(&mut batch, plan.tool_calls);
        self.push_tools(&mut batch, uses);
        self.advance(1, 20);
        self.push(&mut batch, EventData::StepEnd(Box::new(self.step_ref())));
        assert_eq!(
            batch.len() as u64,
            plan.size(),
            "a step holds exactly what its plan counted"
        );
        self.note_gaps(&plan);
        self.turn_done = plan.tool_calls == 0;
        batch
    }

    /// The system head, cleared in-history nodes, a head rewrite, an in-history append.
    fn push_system(&mut self, batch: &mut Vec<Event>, plan: &StepPlan) {
        if plan.prompt_in_header {
            self.change_v2_prompt(plan);
            return;
        }
        if plan.head {
            let content = vec![ContentBlock::text(self.system_prompt())];
            let data = self.system_data(content);
            self.head = Some(self.push_surface(batch, data, SurfaceOp::Append, None));
        }
        for &seq in &plan.empties {
            let data = self.system_data(Vec::new());
            let op = SurfaceOp::Replace {
                start_seq: seq,
                end_seq: seq,
            };
            self.push_surface(batch, data, op, Some(vec![seq]));
        }
        if plan.head_rewrite {
            let head = self
                .head
                .expect("a head rewrite is planned only once the head exists");
            let content = vec![ContentBlock::text(self.system_prompt())];
            let data = self.system_data(content);
            let op = SurfaceOp::Replace {
                start_seq: head,
                end_seq: head,
            };
            self.head = Some(self.push_surface(batch, data, op, Some(vec![head])));
            assert_eq!(
                self.surface[0].seq,
                self.head.expect("just set"),
                "the head stays at 0"
            );
        }
        if plan.history_append {
            self.prompt_revision += 1;
            let words = self.rng.range(40, 160);
            let text = format!(
                "Updated instructions, revision {}.\n\n{}",
                self.prompt_revision,
                prose(&mut self.rng, words)
            );
            let data = self.system_data(vec![ContentBlock::text(text)]);
            self.push_surface(batch, data, SurfaceOp::Append, None);
        }
    }

    /// V2: the head and its rewrites only change the prompt the next request header carries;
    /// the surface model's stand-in node keeps the prompt's tokens in every request.
    fn change_v2_prompt(&mut self, plan: &StepPlan) {
        if !plan.head && !plan.head_rewrite {
            return;
        }
        let prompt = self.system_prompt();
        let tokens = tokens_of(&[ContentBlock::text(prompt.clone())]);
        self.prompt = Some(prompt);
        if plan.head {
            self.head = Some(V2_PROMPT_NODE_SEQ);
            self.surface.push(Live {
                seq: V2_PROMPT_NODE_SEQ,
                kind: NodeKind::System,
                tokens,
                blank: false,
                tool: None,
            });
        } else {
            self.surface[0].tokens = tokens;
            // A new prompt is a new prefix: the provider cache keeps nothing.
            self.cached_tokens = self.cached_tokens.min(REQUEST_OVERHEAD_TOKENS);
            self.need_series = true;
        }
    }

    /// The user prompt (and the title it gives), a runtime-context snapshot, a steering note.
    fn push_user(&mut self, batch: &mut Vec<Event>, plan: &StepPlan) {
        if plan.prompt {
            let words = self.rng.range(8, 90);
            let text = prose(&mut self.rng, words);
            let title: String = text.split(' ').take(5).collect::<Vec<_>>().join(" ");
            let message = self.message("user", source("user"), vec![ContentBlock::text(text)]);
            let data = EventData::UserMessage(Box::new(message));
            let seq = self.push_surface(batch, data, SurfaceOp::Append, None);
            if plan.title {
                let data = json!({
                    "title": title, "messageSeqs": [seq], "source": { "kind": "fallback" },
                });
                self.push_other(batch, EventType::SessionTitle, data);
                self.title = Some((seq, title));
            }
        }
        if plan.runtime {
            let message = self.runtime_context();
            self.push_surface(
                batch,
                EventData::UserMessage(Box::new(message)),
                SurfaceOp::Append,
                None,
            );
            self.runtime_due = false;
        }
        if plan.steer {
            self.advance(1_000, 20_000);
            let words = self.rng.range(5, 30);
            let text = prose(&mut self.rng, words);
            let message = self.message("user", source("user"), vec![ContentBlock::text(text)]);
            self.push_surface(
                batch,
                EventData::UserMessage(Box::new(message)),
                SurfaceOp::Append,
                None,
            );
        }
    }

    /// `request/header` and `request/context`, each only when the plan says it changed.
    fn push_request(&mut self, batch: &mut Vec<Event>, plan: &StepPlan) {
        if let Some(reason) = plan.header {
            if plan.tools_change {
                self.extra_tool = !self.extra_tool;
            }
            let config = CallConfig {
                provider: Some(PROVIDER.to_owned()),
                model: MODEL.to_owned(),
                reasoning_effort: None,
                temperature: None,
                max_tokens: None,
                stop: None,
                extra: Extra::new(),
            };
            let header = EpochHeader {
                config,
                adapter_defaults: None,
                tools: Some(self.tools[usize::from(self.extra_tool)].clone()),
                system: self.prompt.clone().map(Value::String),
                extra: Extra::new(),
            };
            let starts_series = plan.starts_series.then_some(true);
            let data = RequestHeaderData {
                header,
                reason: reason.to_owned(),
                starts_series,
                extra: Extra::new(),
            };
            let header_seq = self.push(batch, EventData::RequestHeader(Box::new(data)));
            if plan.developer {
                self.push_developer(batch, header_seq);
            }
            self.header_logged = true;
            self.need_series = false;
        }
        if plan.context {
            if plan.route_change {
                self.in_history = !self.in_history;
            }
            let data = RequestContextData {
                provider: PROVIDER.to_owned(),
                model: MODEL.to_owned(),
                context_window: Some(Number::from(CONTEXT_WINDOW_TOKENS)),
                system_prompt_update: self.in_history.then(|| "in-history".to_owned()),
                extra: Extra::new(),
            };
            self.push(batch, EventData::RequestContext(Box::new(data)));
            self.context_logged = true;
        }
    }

    /// V4: the tool change of the header at `header_seq`, as the tool registry announces it.
    fn push_developer(&mut self, batch: &mut Vec<Event>, header_seq: u64) {
        let (tag, header_seq) = if self.extra_tool {
            ("tool-addition", Some(Value::from(header_seq)))
        } else {
            ("tool-removal", None)
        };
        let mut block = Extra::new();
        block.insert("type".to_owned(), tag.into());
        block.insert("toolName".to_owned(), super::tools::EXTRA_TOOL.into());
        let message = self.message(
            "developer",
            source("tool-registry"),
            vec![ContentBlock::Other(block)],
        );
        let data = DeveloperMessageData {
            turn: self.turn,
            step: self.step,
            message,
            header_seq,
            extra: Extra::new(),
        };
        let data = EventData::DeveloperMessage(Box::new(data));
        self.push_surface(batch, data, SurfaceOp::Append, None);
    }

    /// A plugin source of V3, or the producer-owned kind V4 writes instead (dsh-v4.md 5.4).
    pub(super) fn plugin_source(&self, plugin: &str, role: &str) -> Source {
        if !self.v4() {
            return Source {
                plugin: Some(plugin.to_owned()),
                ..source("plugin")
            };
        }
        let kind = match (plugin, role) {
            (PROMPT_PLUGIN, "system") => "system-prompt",
            (PROMPT_PLUGIN, _) => "runtime-context",
            ("compact", _) => "compact-checkpoint",
            _ => plugin,
        };
        source(kind)
    }

    /// A tool result message: V3's user message holding one `tool-result` wrapper, or V4's
    /// tool message.
    pub(super) fn tool_result_message(
        &mut self,
        call_id: String,
        content: Vec<ContentBlock>,
    ) -> Message {
        let tool_source = Source {
            call_id: Some(call_id.clone()),
            ..source("tool")
        };
        if self.v4() {
            let mut message = self.message("tool", tool_source, content);
            message
                .extra
                .insert("toolCallId".to_owned(), call_id.into());
            message.extra.insert("isError".to_owned(), false.into());
            return message;
        }
        let block = ContentBlock::ToolResult(ToolResultBlock {
            tool_call_id: call_id,
            content,
            is_error: Some(false),
            extra: Extra::new(),
        });
        self.message("user", tool_source, vec![block])
    }

    /// An empty response, then the retry that is scheduled and started for it.
    fn push_retry(&mut self, batch: &mut Vec<Event>) {
        let retry_id = self.id("retry");
        let failure = json!({ "message": EMPTY_RESPONSE, "code": "EMPTY_RESPONSE" });
        self.advance(300, 3_000);
        let usage = TokenUsage {
            input_tokens: self.surface_tokens() + REQUEST_OVERHEAD_TOKENS,
            output_tokens: 0,
            cache_read_tokens: None,
            reasoning_tokens: None,
            total_tokens: None,
            extra: Extra::new(),
        };
        let finish = json!({ "kind": "error", "failure": failure });
        let stream = vec![
            raw(
                self.time,
                StreamChunk::Usage(UsageChunk {
                    usage,
                    extra: Extra::new(),
                }),
            ),
            raw(self.time, finish_chunk(finish)),
        ];
        let (turn, step) = (self.turn, self.step);
        let data = AssistantAttemptData {
            turn,
            step,
            stream,
            extra: Extra::new(),
        };
        self.push(batch, EventData::AssistantAttempt(Box::new(data)));
        let delay_ms = self.rng.range(200, 2_000);
        let retry = json!({
            "retryId": retry_id, "turn": turn, "step": step, "provider": PROVIDER,
            "mode": "normal", "policyKey": RETRY_POLICY_KEY, "retry": 1, "maxRetries": 2,
            "delayMs": delay_ms, "failure": failure,
        });
        self.push_other(batch, EventType::LlmRetry, retry);
        self.advance(delay_ms, delay_ms + 5);
        let started = json!({ "retryId": retry_id, "turn": turn, "step": step, "retry": 1 });
        self.push_other(batch, EventType::LlmRetryStarted, started);
    }

    /// The assistant message with its embedded stream; returns the tool calls it makes.
    fn push_assistant(
        &mut self,
        batch: &mut Vec<Event>,
        tool_calls: u64,
    ) -> Vec<(String, ToolUse)> {
        let words = self.rng.range(15, 160);
        let reasoning = prose(&mut self.rng, words);
        let mut content = vec![ContentBlock::Reasoning(TextBlock {
            text: reasoning,
            extra: Extra::new(),
        })];
        let answers = tool_calls == 0;
        if answers || self.rng.permille(350) {
            let words = if answers {
                self.rng.range(20, 300)
            } else {
                self.rng.range(5, 40)
            };
            content.push(ContentBlock::text(prose(&mut self.rng, words)));
        }
        let mut uses = Vec::with_capacity(usize::try_from(tool_calls).expect("a small count"));
        for call_idx in 0..tool_calls {
            let tool = tool_use(&mut self.rng);
            let id = format!("call_{call_idx:02}_{}", base62(&mut self.rng, 24));
            content.push(ContentBlock::ToolCall(ToolCallBlock {
                id: id.clone(),
                name: tool.name.to_owned(),
                arguments: tool.arguments.clone(),
                extra: Extra::new(),
            }));
            uses.push((id, tool));
        }
        let usage = self.usage(&content);
        self.advance(300, 2_500);
        let finish = if answers { "stop" } else { "tool-calls" };
        let stream = self.stream(&content, &usage, finish);
        let model_source = Source {
            provider: Some(PROVIDER.to_owned()),
            model: Some(MODEL.to_owned()),
            ..source("model")
        };
        let data = AssistantMessageData {
            turn: self.turn,
            step: self.step,
            message: self.message("assistant", model_source, content),
            stream: Some(stream),
            usage: Some(usage),
            interrupted: None,
            extra: Extra::new(),
        };
        self.push_surface(
            batch,
            EventData::AssistantMessage(Box::new(data)),
            SurfaceOp::Append,
            None,
        );
        uses
    }

    /// One `tool/call` per call as it starts, then one `tool/result` per call as it settles.
    fn push_tools(&mut self, batch: &mut Vec<Event>, uses: Vec<(String, ToolUse)>) {
        let mut call_seqs = Vec::with_capacity(uses.len());
        for (id, tool) in &uses {
            self.advance(1, 20);
            let data = ToolCallData {
                turn: self.turn,
                step: self.step,
                call_id: id.clone(),
                name: tool.name.to_owned(),
                arguments: tool.arguments.clone(),
                extra: Extra::new(),
            };
            call_seqs.push(self.push(batch, EventData::ToolCall(Box::new(data))));
        }
        for ((id, tool), call_seq) in uses.into_iter().zip(call_seqs) {
            self.advance(20, 4_000);
            let message = self.tool_result_message(id, vec![ContentBlock::text(tool.output)]);
            let data = ToolResultData {
                turn: self.turn,
                step: self.step,
                message,
                error: None,
                meta: None,
                extra: Extra::new(),
            };
            let op = SurfaceOp::Append;
            self.push_surface(
                batch,
                EventData::ToolResult(Box::new(data)),
                op,
                Some(vec![call_seq]),
            );
        }
    }

    fn runtime_context(&mut self) -> Message {
        let preset = PRESETS[self.preset];
        let sandbox = format!(
            "Current DSH file policy: {preset}. Any available operation enforced by the DSH \
             file sandbox may modify files under the session workspace: \"{CWD}\". Some \
             platform temporary areas may also be writable."
        );
        let approval = "Approval policy: ask. Operations that require approval may ask through \
             the configured answerers; without an available answerer, the request fails closed.";
        let text = format!(
            "Current runtime context. This snapshot supersedes earlier runtime-context \
             snapshots.\n\n{sandbox}\n\n{approval}"
        );
        let mut snapshot = self.plugin_source(PROMPT_PLUGIN, "user");
        snapshot.extra.insert("form".to_owned(), json!("snapshot"));
        let sections = json!([
            { "name": "sandbox:policy", "text": sandbox },
            { "name": "approval:policy", "text": approval },
        ]);
        snapshot.extra.insert("sections".to_owned(), sections);
        self.message("user", snapshot, vec![ContentBlock::text(text)])
    }

    fn system_prompt(&mut self) -> String {
        self.prompt_revision += 1;
        let mut text = format!(
            "You are dsh, a coding agent working in {CWD}. Prompt revision {}.",
            self.prompt_revision
        );
        for section in ["Working style", "Tools", "Safety", "Output"] {
            let words = self.rng.range(60, 160);
            text.push_str(&format!(
                "\n\n# {section}\n\n{}",
                prose(&mut self.rng, words)
            ));
        }
        text
    }

    fn system_data(&mut self, content: Vec<ContentBlock>) -> EventData {
        let prompt_source = self.plugin_source(PROMPT_PLUGIN, "system");
        EventData::SystemMessage(Box::new(SystemMessageData {
            turn: self.turn,
            step: self.step,
            message: self.message("system", prompt_source, content),
            extra: Extra::new(),
        }))
    }
}
