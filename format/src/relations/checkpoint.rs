//! The validator's part of a fold checkpoint: a boundary type, serialized as is, checked on
//! resume. Sets are written sorted, so equal states write equal checkpoints.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    Chain, ChainKey, Compaction, Crossing, Extensions, Ptc, PtcOpen, Relations, Scalars, Scheduled,
    Tool,
};
use crate::rules::RuleContext;

/// Everything [`Relations`] holds besides its configuration (version, identity).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RelationsCheckpoint {
    /// The V1 -> V2 edge's legacy restart extension.
    pub legacy_restart: bool,
    pub open_turn: Option<u64>,
    pub open_step: Option<u64>,
    pub next_turn: u64,
    pub next_step: u64,
    pub prev_next_turn_splice: bool,
    /// `(seq, is turn/end)` of a compaction crossing not yet proven stale.
    pub crossing: Option<(u64, bool)>,
    pub foreign_delivery: Option<u64>,
    pub provider: Option<String>,
    /// The open step's lifecycles in advertisement order; `None` once resolved.
    pub tools: Vec<Option<ToolCheckpoint>>,
    pub compaction: Option<CompactionCheckpoint>,
    pub chains: Vec<ChainCheckpoint>,
    pub retry_ids: Vec<String>,
    pub scheduled: Vec<ScheduledCheckpoint>,
    pub commands: Vec<String>,
    pub command_seqs: Vec<u64>,
    pub forward_sources: Vec<(u64, String)>,
    pub ptc: Vec<PtcCheckpoint>,
    pub human_users: Vec<u64>,
    /// V4: an inherited end-seed was seen (catalog facts after it are the session's own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inherited_seen: bool,
    /// V4: the children the session's own catalog facts list, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub catalog_children: Vec<String>,
    /// V4: the `request/header` seqs with the tools each defines (`(name, complete)`; `None`
    /// binds any name). Absent in V2 and V3 checkpoints, which therefore stay as they were.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderCheckpoint>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderCheckpoint {
    pub seq: u64,
    pub tools: Option<Vec<(String, bool)>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCheckpoint {
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    pub started: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactionCheckpoint {
    pub id: String,
    pub source_command_id: Option<String>,
    pub owner: Option<u64>,
    pub start_seq: u64,
    pub summarized: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChainCheckpoint {
    pub turn: u64,
    pub step: u64,
    pub provider: Option<String>,
    pub policy_key: Option<String>,
    pub last_retry: u64,
    pub retry_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScheduledCheckpoint {
    pub retry_id: String,
    pub retry: u64,
    pub turn: u64,
    pub step: u64,
    pub started: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PtcCheckpoint {
    pub sub_call_id: String,
    pub root_call_id: String,
    /// The unsettled start's parent, name and arguments.
    pub open: Option<(String, String, Value)>,
}

impl Relations {
    /// The checkpoint of this state; O(state).
    pub fn checkpoint(&self) -> RelationsCheckpoint {
        let s = &self.s;
        let mut chains: Vec<ChainCheckpoint> = (self.chains.iter())
            .map(|(key, chain)| ChainCheckpoint {
                turn: key.turn,
                step: key.step,
                provider: key.provider.as_deref().map(str::to_owned),
                policy_key: key.policy_key.as_deref().map(str::to_owned),
                last_retry: chain.last_retry,
                retry_id: chain.retry_id.to_string(),
            })
            .collect();
        chains.sort();
        let mut scheduled: Vec<ScheduledCheckpoint> = (self.scheduled.iter())
            .map(|((retry_id, retry), s)| ScheduledCheckpoint {
                retry_id: retry_id.to_string(),
                retry: *retry,
                turn: s.turn,
                step: s.step,
                started: s.started,
            })
            .collect();
        scheduled.sort();
        let mut ptc: Vec<PtcCheckpoint> = (self.ptc.iter())
            .map(|(sub, p)| PtcCheckpoint {
                sub_call_id: sub.to_string(),
                root_call_id: p.root.to_string(),
                open: p.open.as_ref().map(|o| {
                    (
                        o.parent.to_string(),
                        o.name.to_string(),
                        o.arguments.clone(),
                    )
                }),
            })
            .collect();
        ptc.sort_by(|a, b| a.sub_call_id.cmp(&b.sub_call_id));
        RelationsCheckpoint {
            legacy_restart: self.ext.legacy_interrupted_turn_restart,
            open_turn: s.open_turn,
            open_step: s.open_step,
            next_turn: s.next_turn,
            next_step: s.next_step,
            prev_next_turn_splice: s.prev_next_turn_splice,
            crossing: s.crossing.map(|c| (c.seq, c.turn_end)),
            foreign_delivery: s.foreign_delivery,
            provider: self.provider.as_deref().map(str::to_owned),
            tools: (self.tools.iter())
                .map(|t| {
                    t.as_ref().map(|t| ToolCheckpoint {
                        call_id: t.call_id.to_string(),
                        name: t.name.to_string(),
                        arguments: t.arguments.to_string(),
                        started: t.started,
                    })
                })
                .collect(),
            compaction: self.compaction.as_ref().map(|c| CompactionCheckpoint {
                id: c.id.to_string(),
                source_command_id: c.source_command_id.as_deref().map(str::to_owned),
                owner: c.owner,
                start_seq: c.start_seq,
                summarized: c.summarized,
            }),
            chains,
            retry_ids: sorted(self.retry_ids.iter().map(|id| id.to_string())),
            scheduled,
            commands: sorted(self.commands.iter().map(|id| id.to_string())),
            command_seqs: self.command_seqs.clone(),
            forward_sources: (self.forward_sources.iter())
                .map(|(seq, id)| (*seq, id.to_string()))
                .collect(),
            ptc,
            human_users: self.human_users.clone(),
            inherited_seen: s.inherited_seen,
            catalog_children: sorted(self.catalog_children.iter().map(|id| id.to_string())),
            headers: (self.headers.iter())
                .map(|(seq, tools)| HeaderCheckpoint {
                    seq: *seq,
                    tools: tools.as_ref().map(|tools| {
                        let tools = tools.iter();
                        tools
                            .map(|(name, complete)| (name.to_string(), *complete))
                            .collect()
                    }),
                })
                .collect(),
        }
    }

    /// The state a checkpoint records, for a log of `ctx`; checks that its parts agree and
    /// that every seq is older than `next_seq` (forward command sources excepted).
    pub fn from_checkpoint(
        ctx: RuleContext,
        cp: RelationsCheckpoint,
        next_seq: u64,
    ) -> Result<Relations, String> {
        let mut relations = Relations::new(ctx);
        if !relations.enabled && cp != RelationsCheckpoint::default_for(false) {
            return Err(format!("format {} has no relationship state", ctx.version));
        }
        relations.ext = Extensions {
            legacy_interrupted_turn_restart: cp.legacy_restart,
        };
        relations.s = Scalars {
            open_turn: cp.open_turn,
            open_step: cp.open_step,
            next_turn: cp.next_turn,
            next_step: cp.next_step,
            prev_next_turn_splice: cp.prev_next_turn_splice,
            crossing: cp
                .crossing
                .map(|(seq, turn_end)| Crossing { seq, turn_end }),
            foreign_delivery: cp.foreign_delivery,
            inherited_seen: cp.inherited_seen,
        };
        if cp.open_step.is_some() && cp.open_turn.is_none() {
            return Err("a step is open outside a turn".to_owned());
        }
        relations.provider = cp.provider.map(String::into_boxed_str);
        for (idx, tool) in cp.tools.into_iter().enumerate() {
            let tool = tool.map(|t| Tool {
                call_id: t.call_id.into(),
                name: t.name.into(),
                arguments: t.arguments.into(),
                started: t.started,
            });
            if let Some(tool) = &tool {
                if relations
                    .tool_idx
                    .insert(tool.call_id.clone(), idx)
                    .is_some()
                {
                    return Err(format!("tool call {} is advertised twice", tool.call_id));
                }
            }
            relations.tools.push(tool);
        }
        if !relations.tools.is_empty() && cp.open_step.is_none() {
            return Err("tool lifecycles outside an open step".to_owned());
        }
        relations.compaction = cp.compaction.map(|c| {
            Box::new(Compaction {
                id: c.id.into(),
                source_command_id: c.source_command_id.map(String::into_boxed_str),
                owner: c.owner,
                start_seq: c.start_seq,
                summarized: c.summarized,
            })
        });
        for c in cp.chains {
            let key = ChainKey {
                turn: c.turn,
                step: c.step,
                provider: c.provider.map(String::into_boxed_str),
                policy_key: c.policy_key.map(String::into_boxed_str),
            };
            let chain = Chain {
                last_retry: c.last_retry,
                retry_id: c.retry_id.into(),
            };
            if relations.chains.insert(key, chain).is_some() {
                return Err("a retry chain is recorded twice".to_owned());
            }
        }
        relations.retry_ids = cp
            .retry_ids
            .into_iter()
            .map(String::into_boxed_str)
            .collect();
        for s in cp.scheduled {
            let entry = Scheduled {
                turn: s.turn,
                step: s.step,
                started: s.started,
            };
            let key = (s.retry_id.into_boxed_str(), s.retry);
            if !relations.retry_ids.contains(&key.0)
                || relations.scheduled.insert(key, entry).is_some()
            {
                return Err("a scheduled retry is not of one recorded chain".to_owned());
            }
        }
        relations.commands = cp
            .commands
            .into_iter()
            .map(String::into_boxed_str)
            .collect();
        let ascending = |seqs: &[u64]| {
            seqs.windows(2).all(|w| w[0] < w[1]) && seqs.last().is_none_or(|s| *s < next_seq)
        };
        if !ascending(&cp.command_seqs) || !ascending(&cp.human_users) {
            return Err("recorded seqs are not ascending and older than next seq".to_owned());
        }
        let v4_state =
            !cp.headers.is_empty() || cp.inherited_seen || !cp.catalog_children.is_empty();
        if !relations.v4 && v4_state {
            return Err(format!("format {} records no V4 state", ctx.version));
        }
        relations.catalog_children = cp
            .catalog_children
            .into_iter()
            .map(String::into_boxed_str)
            .collect();
        for header in cp.headers {
            if header.seq >= next_seq {
                return Err(format!(
                    "request header {} is not older than next seq",
                    header.seq
                ));
            }
            let tools = header.tools.map(|tools| {
                let tools = tools.into_iter();
                tools
                    .map(|(name, complete)| (name.into_boxed_str(), complete))
                    .collect()
            });
            if relations.headers.insert(header.seq, tools).is_some() {
                return Err(format!("request header {} is recorded twice", header.seq));
            }
        }
        relations.command_seqs = cp.command_seqs;
        relations.human_users = cp.human_users;
        for (seq, id) in cp.forward_sources {
            if seq < next_seq {
                return Err(format!(
                    "forward command source {seq} is not ahead of the log"
                ));
            }
            relations.forward_sources.insert(seq, id.into());
        }
        for p in cp.ptc {
            let entry = Ptc {
                root: p.root_call_id.into(),
                open: p.open.map(|(parent, name, arguments)| {
                    Box::new(PtcOpen {
                        parent: parent.into(),
                        name: name.into(),
                        arguments,
                    })
                }),
            };
            if relations.ptc.insert(p.sub_call_id.into(), entry).is_some() {
                return Err("a PTC subCallId is recorded twice".to_owned());
            }
        }
        // A checkpoint written before the validator pruned its chains holds dead ones.
        relations.prune_chains();
        Ok(relations)
    }
}

impl RelationsCheckpoint {
    /// Drops the retry chains no later retry can extend, as the validator does whenever its
    /// turn or step moves on, so that a checkpoint an older build wrote (which kept every
    /// chain) compares equal with one written now of the same state.
    pub fn prune_chains(&mut self) {
        let live = super::retry_step_of(self.open_turn, self.open_step, self.next_step);
        self.chains.retain(|c| Some((c.turn, c.step)) == live);
    }

    /// The checkpoint of an empty log.
    pub fn default_for(legacy_restart: bool) -> RelationsCheckpoint {
        RelationsCheckpoint {
            legacy_restart,
            next_turn: 1,
            next_step: 1,
            ..RelationsCheckpoint::default()
        }
    }
}

fn sorted(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut items: Vec<String> = items.collect();
    items.sort_unstable();
    items
}
