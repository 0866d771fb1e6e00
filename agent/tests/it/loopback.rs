//! A minimal loopback HTTP server that speaks the DeepSeek chat-completions SSE protocol,
//! answers from a script and records every request body, shared by the agent and compaction
//! tests.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};
use sessionlog_agent::compaction::COMPACTION_INSTRUCTION;

/// One scripted HTTP reply.
#[derive(Clone)]
pub enum Reply {
    /// 200 with these SSE chunks (JSON) then `[DONE]`.
    Sse(Vec<Value>),
    /// An error status.
    Status(u16),
    /// 200 with these chunks, then a stall of a few seconds with the connection open.
    Stall(Vec<Value>),
}

pub struct Server {
    pub base: String,
    bodies: Arc<Mutex<Vec<Value>>>,
}

pub fn text_chunk(text: &str) -> Value {
    json!({ "choices": [{ "index": 0, "delta": { "content": text } }] })
}

pub fn done_chunks(text: &str) -> Vec<Value> {
    vec![
        text_chunk(text),
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }],
                "usage": { "prompt_tokens": 20, "completion_tokens": 3, "prompt_cache_hit_tokens": 16 } }),
    ]
}

pub fn tool_chunks(id: &str, name: &str, arguments: &str) -> Vec<Value> {
    vec![
        json!({ "choices": [{ "index": 0, "delta": { "tool_calls": [
            { "index": 0, "id": id, "type": "function", "function": { "name": name, "arguments": arguments } }
        ] } }] }),
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "tool_calls" }] }),
    ]
}

pub fn sse(chunks: &[Value]) -> String {
    chunks.iter().map(|c| format!("data: {c}\n\n")).collect()
}

/// Whether `body` is a summarisation call: its last message is the compaction instruction.
pub fn is_summarisation(body: &Value) -> bool {
    let last = body["messages"].as_array().and_then(|m| m.last());
    last.is_some_and(|m| m["content"] == COMPACTION_INSTRUCTION)
}

fn read_body(reader: &mut BufReader<TcpStream>) -> Value {
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    let _ = reader.read_exact(&mut body);
    serde_json::from_slice(&body).unwrap_or(Value::Null)
}

fn answer(mut stream: TcpStream, reply: Reply) {
    let head = |status: &str, kind: &str| {
        format!("HTTP/1.1 {status}\r\ncontent-type: {kind}\r\nconnection: close\r\n\r\n")
    };
    let _ = match reply {
        Reply::Sse(chunks) => {
            let text = head("200 OK", "text/event-stream") + &sse(&chunks) + "data: [DONE]\n\n";
            stream.write_all(text.as_bytes())
        }
        Reply::Status(code) => {
            let text = head(&format!("{code} Error"), "application/json")
                + "{\"error\":{\"message\":\"busy\"}}";
            stream.write_all(text.as_bytes())
        }
        Reply::Stall(chunks) => {
            let text = head("200 OK", "text/event-stream") + &sse(&chunks);
            let _ = stream.write_all(text.as_bytes());
            let _ = stream.flush();
            thread::sleep(Duration::from_secs(3));
            Ok(())
        }
    };
}

impl Server {
    /// Answers one connection per scripted reply, in order, then stops listening.
    pub fn start(replies: Vec<Reply>) -> Server {
        Server::serve(replies, None)
    }

    /// Like [`Server::start`], but every summarisation call (see [`is_summarisation`]) gets
    /// `summary` without consuming the script, and the server keeps listening; a request
    /// past the end of the script gets a 500.
    pub fn with_summaries(replies: Vec<Reply>, summary: Reply) -> Server {
        Server::serve(replies, Some(summary))
    }

    fn serve(replies: Vec<Reply>, summary: Option<Reply>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let base = format!("http://{}", listener.local_addr().expect("an address"));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&bodies);
        let connections = if summary.is_some() {
            usize::MAX
        } else {
            replies.len()
        };
        let script = Arc::new(Mutex::new(VecDeque::from(replies)));
        thread::spawn(move || {
            for _ in 0..connections {
                let Ok((stream, _)) = listener.accept() else {
                    return;
                };
                let recorded = Arc::clone(&recorded);
                let script = Arc::clone(&script);
                let summary = summary.clone();
                thread::spawn(move || {
                    let mut reader = BufReader::new(stream);
                    let body = read_body(&mut reader);
                    let reply = match summary {
                        Some(summary) if is_summarisation(&body) => summary,
                        _ => script
                            .lock()
                            .expect("the lock")
                            .pop_front()
                            .unwrap_or(Reply::Status(500)),
                    };
                    recorded.lock().expect("the lock").push(body);
                    answer(reader.into_inner(), reply);
                });
            }
        });
        Server { base, bodies }
    }

    pub fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().expect("the lock").clone()
    }
}
