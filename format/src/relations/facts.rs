//! The validator's whole-log facts as a journal: the retry attempts scheduled and started, the
//! command runs and completions, the human user messages, and (V4) the request headers. These
//! are the sets whose rules reach back across the whole log, so they grow with it; the
//! validator keeps them in memory for its lookups and, beside them, appends each fact to this
//! journal as it commits the event that adds it. A checkpoint carries the journal's bytes as
//! they are (no per-checkpoint rebuild, sort or re-encoding of the sets), an undo truncates it,
//! and a resume replays it into the sets, checking every fact against the ones before it.
//!
//! # Layout
//!
//! A journal is a sequence of facts, each a tag byte then its fields. A `u` is a varint (the
//! binary JSON's: unsigned LEB128, shortest form), a `s` is a varint byte length then that many
//! bytes of UTF-8.
//!
//! | Tag | Fact | Fields |
//! |---|---|---|
//! | `0x01` | an `llm/retry` scheduled attempt | `s` retryId, `u` retry, `u` turn, `u` step |
//! | `0x02` | an `llm/retry-started` | `s` retryId, `u` retry |
//! | `0x03` | a `command/run` | `u` seq, `s` commandId |
//! | `0x04` | a `command/done` | `u` seq |
//! | `0x05` | a human `user/message` | `u` seq |
//! | `0x06` | a V4 `request/header` | `u` seq, then `0x00` (binds any name) or `0x01`, `u` count and per tool `s` name and a byte `0x00`/`0x01` (complete definition) |
//!
//! Facts appear in the order of the events that made them, so equal logs write equal journals.

use crate::binary::varint;

use super::HeaderTools;

const RETRY: u8 = 0x01;
const RETRY_STARTED: u8 = 0x02;
const COMMAND_RUN: u8 = 0x03;
const COMMAND_DONE: u8 = 0x04;
const HUMAN_USER: u8 = 0x05;
const HEADER: u8 = 0x06;

/// One decoded fact, borrowing its strings from the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Fact<'a> {
    Retry {
        retry_id: &'a str,
        retry: u64,
        turn: u64,
        step: u64,
    },
    RetryStarted {
        retry_id: &'a str,
        retry: u64,
    },
    CommandRun {
        seq: u64,
        command_id: &'a str,
    },
    CommandDone {
        seq: u64,
    },
    HumanUser {
        seq: u64,
    },
    Header {
        seq: u64,
        tools: Option<Vec<(&'a str, bool)>>,
    },
}

/// Appends `fact` to `journal`.
pub(super) fn push(journal: &mut Vec<u8>, fact: &Fact<'_>) {
    match fact {
        Fact::Retry {
            retry_id,
            retry,
            turn,
            step,
        } => {
            journal.push(RETRY);
            push_str(journal, retry_id);
            varint::write_varint(journal, *retry);
            varint::write_varint(journal, *turn);
            varint::write_varint(journal, *step);
        }
        Fact::RetryStarted { retry_id, retry } => {
            journal.push(RETRY_STARTED);
            push_str(journal, retry_id);
            varint::write_varint(journal, *retry);
        }
        Fact::CommandRun { seq, command_id } => {
            journal.push(COMMAND_RUN);
            varint::write_varint(journal, *seq);
            push_str(journal, command_id);
        }
        Fact::CommandDone { seq } => {
            journal.push(COMMAND_DONE);
            varint::write_varint(journal, *seq);
        }
        Fact::HumanUser { seq } => {
            journal.push(HUMAN_USER);
            varint::write_varint(journal, *seq);
        }
        Fact::Header { seq, tools } => {
            journal.push(HEADER);
            varint::write_varint(journal, *seq);
            match tools {
                None => journal.push(0),
                Some(tools) => {
                    journal.push(1);
                    varint::write_varint(journal, tools.len() as u64);
                    for (name, complete) in tools {
                        push_str(journal, name);
                        journal.push(u8::from(*complete));
                    }
                }
            }
        }
    }
}

/// Appends the fact of a V4 header whose tools are `tools`.
pub(super) fn push_header(journal: &mut Vec<u8>, seq: u64, tools: &HeaderTools) {
    let tools = tools
        .as_ref()
        .map(|tools| tools.iter().map(|(n, c)| (&**n, *c)).collect());
    push(journal, &Fact::Header { seq, tools });
}

fn push_str(journal: &mut Vec<u8>, s: &str) {
    varint::write_varint(journal, s.len() as u64);
    journal.extend_from_slice(s.as_bytes());
}

/// The facts of `journal` in order; an error names the offset of the fact that cannot be
/// read. Nothing is allocated beyond the bytes given (a count larger than what is left fails).
pub(super) struct Facts<'a> {
    journal: &'a [u8],
    pos: usize,
}

impl<'a> Facts<'a> {
    pub(super) fn new(journal: &'a [u8]) -> Facts<'a> {
        Facts { journal, pos: 0 }
    }

    fn fact(&mut self) -> Result<Fact<'a>, String> {
        let tag = self.byte()?;
        Ok(match tag {
            RETRY => Fact::Retry {
                retry_id: self.str()?,
                retry: self.uint()?,
                turn: self.uint()?,
                step: self.uint()?,
            },
            RETRY_STARTED => Fact::RetryStarted {
                retry_id: self.str()?,
                retry: self.uint()?,
            },
            COMMAND_RUN => Fact::CommandRun {
                seq: self.uint()?,
                command_id: self.str()?,
            },
            COMMAND_DONE => Fact::CommandDone { seq: self.uint()? },
            HUMAN_USER => Fact::HumanUser { seq: self.uint()? },
            HEADER => {
                let seq = self.uint()?;
                let tools = match self.byte()? {
                    0 => None,
                    1 => {
                        let count = self.uint()?;
                        // Each tool takes at least two bytes.
                        if count > (self.journal.len() - self.pos) as u64 / 2 {
                            return Err("a header's tool count exceeds the journal".to_owned());
                        }
                        let mut tools = Vec::with_capacity(count as usize);
                        for _ in 0..count {
                            let name = self.str()?;
                            let complete = match self.byte()? {
                                0 => false,
                                1 => true,
                                other => return Err(format!("flag byte {other:#04x}")),
                            };
                            tools.push((name, complete));
                        }
                        Some(tools)
                    }
                    other => return Err(format!("flag byte {other:#04x}")),
                };
                Fact::Header { seq, tools }
            }
            other => return Err(format!("unknown fact tag {other:#04x}")),
        })
    }

    fn byte(&mut self) -> Result<u8, String> {
        let byte = *self
            .journal
            .get(self.pos)
            .ok_or("the journal ends inside a fact")?;
        self.pos += 1;
        Ok(byte)
    }

    fn uint(&mut self) -> Result<u64, String> {
        varint::read(self.journal, &mut self.pos).map_err(|e| e.to_string())
    }

    fn str(&mut self) -> Result<&'a str, String> {
        let len = self.uint()?;
        let rest = &self.journal[self.pos..];
        if len > rest.len() as u64 {
            return Err("the journal ends inside a string".to_owned());
        }
        let bytes = &rest[..len as usize];
        self.pos += len as usize;
        std::str::from_utf8(bytes).map_err(|_| "a string is not UTF-8".to_owned())
    }
}

impl<'a> Iterator for Facts<'a> {
    type Item = Result<Fact<'a>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos == self.journal.len() {
            return None;
        }
        let at = self.pos;
        let fact = self
            .fact()
            .map_err(|e| format!("fact at journal offset {at}: {e}"));
        if fact.is_err() {
            // Stop after the first error.
            self.pos = self.journal.len();
        }
        Some(fact)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: every fact reads back as written, and a damaged journal is an error, never a
    // panic. Method: one fact of each kind round trips; every truncation and a bad tag fail.
    #[test]
    fn facts_round_trip_and_damage_is_refused() {
        let facts = [
            Fact::Retry {
                retry_id: "r1",
                retry: 1,
                turn: 300,
                step: 2,
            },
            Fact::RetryStarted {
                retry_id: "r1",
                retry: 1,
            },
            Fact::CommandRun {
                seq: 70_000,
                command_id: "c-\u{e9}",
            },
            Fact::CommandDone { seq: 70_001 },
            Fact::HumanUser { seq: 5 },
            Fact::Header {
                seq: 9,
                tools: Some(vec![("read", true), ("", false)]),
            },
            Fact::Header {
                seq: 10,
                tools: None,
            },
        ];
        let mut journal = Vec::new();
        for fact in &facts {
            push(&mut journal, fact);
        }
        let read: Vec<Fact<'_>> = Facts::new(&journal).collect::<Result<_, _>>().unwrap();
        assert_eq!(read, facts);
        for cut in 0..journal.len() {
            let read: Result<Vec<Fact<'_>>, String> = Facts::new(&journal[..cut]).collect();
            let whole_facts = cut == 0 || {
                let mut prefix = Vec::new();
                facts.iter().any(|f| {
                    push(&mut prefix, f);
                    prefix.len() == cut
                })
            };
            assert_eq!(read.is_ok(), whole_facts, "cut at {cut}");
        }
        let err = Facts::new(&[0x07])
            .collect::<Result<Vec<_>, _>>()
            .unwrap_err();
        assert_eq!(err, "fact at journal offset 0: unknown fact tag 0x07");
        // A tool count beyond the bytes left fails before allocating.
        let mut huge = vec![HEADER, 1, 1];
        varint::write_varint(&mut huge, u64::MAX);
        assert!(Facts::new(&huge).next().unwrap().is_err());
    }
}
