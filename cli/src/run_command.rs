//! `sessionlog run`: drives agent turns against the replay provider or a DeepSeek-compatible
//! endpoint, writing everything to the store, then prints the request/prefix report. The
//! project instructions are discovered from the process's working directory (up to the
//! nearest `.git`), with `--user-instructions` and `--skills` adding the user-global file and
//! skill folders; all of them reach the model as framed, sourced user messages. With
//! `--json`, the reply is not streamed and stdout carries one document:
//! `{"session","turn","steps","reply","planMode","report":<the requests --json document>}`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;
use sessionlog_agent::agent::deepseek::BASE_URL_ENV;
use sessionlog_agent::agent::turn::{Agent, ContextOptions};
use sessionlog_agent::agent::CancelToken;
use sessionlog_agent::compaction::trigger::CompactionPolicy;
use sessionlog_agent::context::instructions::INSTRUCTIONS_BUDGET_BYTES;
use sessionlog_agent::llm::provider::{open_provider, Provider};
use sessionlog_agent::prompt::capability::DEEPSEEK_FLASH;
use sessionlog_engine::replay::SessionSource;
use sessionlog_engine::requests::{requests, RequestOptions};

use serde_json::json;

use crate::commands::Global;
use crate::output::print_json;
use crate::store_commands::DbArgs;

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The session: resumed as a new turn when it exists, created when new.
    #[arg(long)]
    session: Option<String>,
    /// `replay` (keyless, the default) or `deepseek`.
    #[arg(long, default_value = "replay")]
    provider: String,
    /// The catalog model; `deepseek-flash` declares in-history prompt updates.
    #[arg(long, default_value = DEEPSEEK_FLASH)]
    model: String,
    /// A model catalog (.toml, .yaml/.yml or .json) that replaces the built-in DeepSeek one;
    /// validated whole when loaded.
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
    /// The DeepSeek base URL (default: $DEEPSEEK_BASE_URL, else the public endpoint).
    #[arg(long, env = BASE_URL_ENV)]
    base_url: Option<String>,
    /// Overrides the route's context window (tokens).
    #[arg(long)]
    context_window: Option<u64>,
    /// Compact before a step once the estimated context reaches this percent (1..=100) of
    /// the route's context window (default: $SESSIONLOG_COMPACT_THRESHOLD, else 80).
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u64).range(1..=100))]
    compact_threshold: Option<u64>,
    /// The user-global instructions directory (its AGENTS.md or CLAUDE.md comes first,
    /// before the project root's and the working directory's).
    #[arg(long, value_name = "DIR", env = "SESSIONLOG_USER_INSTRUCTIONS")]
    user_instructions: Option<PathBuf>,
    /// A skills directory: each sub-folder holding a SKILL.md is a skill (repeatable).
    #[arg(long = "skills", value_name = "DIR")]
    skills: Vec<PathBuf>,
    /// The approval policy of this run; a change from the one the session announced last
    /// appends a one-line notice (default on-request).
    #[arg(long, value_name = "POLICY")]
    approval_policy: Option<String>,
    /// The byte budget of the instructions message.
    #[arg(long, value_name = "BYTES", default_value_t = INSTRUCTIONS_BUDGET_BYTES)]
    instructions_budget: usize,
    /// A replay script (JSON; see the engine's `agent::replay`).
    #[arg(long)]
    script: Option<PathBuf>,
    /// The user's prompt.
    #[arg(required = true)]
    prompt: Vec<String>,
}

pub(crate) fn run(global: Global, args: RunArgs) -> anyhow::Result<ExitCode> {
    let store = args.db.open()?;
    let session = args.session.clone().unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        format!("run-{}", now.as_millis())
    });
    let provider = match args.provider.as_str() {
        "replay" => Provider::Replay {
            script: args.script.clone(),
        },
        "deepseek" => Provider::DeepSeek {
            base_url: args.base_url.clone(),
            catalog: args.catalog.clone(),
        },
        other => bail!("unknown provider {other:?} (use replay or deepseek)"),
    };
    let (adapter, mut route) = open_provider(&provider, &args.model)?;
    if let Some(window) = args.context_window {
        route.context_window = Some(window);
    }
    let prompt = args.prompt.join(" ");
    if prompt.trim().is_empty() {
        // Refused before the store is touched: no session is created for an empty input.
        bail!("the input is empty");
    }
    let root = std::env::current_dir().context("no working directory")?;
    let context = ContextOptions {
        user_dir: args.user_instructions.clone(),
        skill_dirs: args.skills.clone(),
        budget_bytes: args.instructions_budget,
    };
    let mut agent = Agent::open(&*store, &session, adapter, route, &root)?.with_context(context)?;
    if let Some(policy) = &args.approval_policy {
        agent.set_approval_policy(policy);
    }
    if let Some(percent) = args.compact_threshold {
        agent = agent.with_compaction(CompactionPolicy {
            threshold_percent: percent,
            ..CompactionPolicy::from_env()
        });
    }
    let stdout = std::io::stdout();
    let report = agent.run_turn(&prompt, &CancelToken::new(), &mut |text| {
        if global.json {
            return;
        }
        let mut out = stdout.lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    });
    if !global.json {
        println!();
    }
    let report = report?;
    let plan_mode = agent.plan_mode();
    drop(agent);
    if global.json {
        let source = SessionSource::Store {
            store: &*store,
            session: &session,
        };
        let requests = requests(source, RequestOptions { bodies: true })?;
        print_json(&json!({
            "session": session,
            "turn": report.turn,
            "steps": report.steps,
            "reply": report.reply,
            "planMode": plan_mode,
            "report": crate::requests_command::report_json(&requests)?,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "session {session}: turn {} ({} steps)",
        report.turn, report.steps
    );
    let source = SessionSource::Store {
        store: &*store,
        session: &session,
    };
    let requests = requests(source, RequestOptions { bodies: false })?;
    crate::requests_command::write_table(&mut std::io::stdout().lock(), &requests)?;
    Ok(ExitCode::SUCCESS)
}
