//! `sessionlog compact`: one manual compaction over a stored session's head, or with
//! `--from SEQ --to SEQ` over a chosen surface region after node 0.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde_json::json;

use sessionlog_agent::agent::deepseek::BASE_URL_ENV;
use sessionlog_agent::agent::CancelToken;
use sessionlog_agent::compaction::run::DEFAULT_RETAIN_TOKENS;
use sessionlog_agent::compaction::{compact, compact_region, CompactionOptions};
use sessionlog_agent::llm::provider::{open_provider, Provider};
use sessionlog_agent::prompt::capability::DEEPSEEK_FLASH;

use crate::commands::Global;
use crate::output::{print_json, EXIT_OK};
use crate::store_commands::DbArgs;
use sessionlog_engine::log_store::with_fold;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProviderArg {
    /// The keyless scripted provider.
    Replay,
    /// A DeepSeek-compatible endpoint ($DEEPSEEK_API_KEY).
    Deepseek,
}

#[derive(Debug, Args)]
pub(crate) struct CompactArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The stored session to compact.
    session: String,
    /// The summarisation provider.
    #[arg(long, value_enum, default_value_t = ProviderArg::Replay)]
    provider: ProviderArg,
    /// The summarisation model (default: the model of the request header in force, so the
    /// call can reuse the conversation's cached prefix; else deepseek-flash).
    #[arg(long)]
    model: Option<String>,
    /// The recent tail to keep, in estimated tokens (ignored with --from/--to).
    #[arg(long, default_value_t = DEFAULT_RETAIN_TOKENS)]
    retain_tokens: u64,
    /// Compact the surface region starting at this seq (with --to) instead of the head.
    #[arg(long, value_name = "SEQ", requires = "to")]
    from: Option<u64>,
    /// The last seq of the region (inclusive, with --from).
    #[arg(long, value_name = "SEQ", requires = "from")]
    to: Option<u64>,
    /// The DeepSeek base URL (default: $DEEPSEEK_BASE_URL, else the public endpoint).
    #[arg(long, env = BASE_URL_ENV)]
    base_url: Option<String>,
    /// A replay script (JSON; see the engine's `agent::replay`).
    #[arg(long)]
    script: Option<PathBuf>,
}

pub(crate) fn run(global: Global, args: CompactArgs) -> anyhow::Result<ExitCode> {
    let store = args.db.open()?;
    let header_model = with_fold(&*store, &args.session, |f| {
        f.request_header().map(|h| h.config.model.clone())
    })?;
    let model = args
        .model
        .clone()
        .or(header_model)
        .unwrap_or_else(|| DEEPSEEK_FLASH.to_owned());
    let provider = match args.provider {
        ProviderArg::Replay => Provider::Replay {
            script: args.script.clone(),
        },
        ProviderArg::Deepseek => Provider::DeepSeek {
            base_url: args.base_url.clone(),
            catalog: None,
        },
    };
    let (mut adapter, route) = open_provider(&provider, &model)?;
    let options = CompactionOptions {
        retain_tokens: args.retain_tokens,
        ..CompactionOptions::default()
    };
    let cancel = CancelToken::new();
    let report = match (args.from, args.to) {
        (Some(from), Some(to)) => Some(compact_region(
            &*store,
            &args.session,
            from,
            to,
            adapter.as_mut(),
            &route,
            &cancel,
        )?),
        _ => compact(
            &*store,
            &args.session,
            adapter.as_mut(),
            &route,
            options,
            &cancel,
        )?,
    };
    let Some(report) = report else {
        if global.json {
            print_json(&json!({ "session": args.session, "compacted": false }))?;
        } else if !global.quiet {
            println!("{}: nothing to compact", args.session);
        }
        return Ok(ExitCode::from(EXIT_OK));
    };
    if global.json {
        print_json(&json!({
            "session": args.session,
            "compacted": true,
            "compactionId": report.compaction_id,
            "startSeq": report.start_seq,
            "checkpointSeq": report.checkpoint_seq,
            "endSeq": report.end_seq,
            "shadowedSeqs": report.range.shadowed_seqs,
            "shadowedTokens": report.range.shadowed_tokens,
            "checkpointTokens": report.checkpoint_tokens,
            "provider": report.provider,
            "model": report.model,
            "atHead": report.at_head,
            "reusesPrefix": report.reuses_prefix,
        }))?;
    } else if !global.quiet {
        let reuse = if report.reuses_prefix {
            "reuses the conversation prefix"
        } else if !report.at_head {
            "a region after the head: no prefix reuse"
        } else {
            "another route: no prefix reuse"
        };
        println!(
            "{}: compacted {} nodes ({} tokens) into checkpoint seq {} ({} tokens); {}/{} {reuse}",
            args.session,
            report.range.shadowed_seqs.len(),
            report.range.shadowed_tokens,
            report.checkpoint_seq,
            report.checkpoint_tokens,
            report.provider,
            report.model,
        );
    }
    Ok(ExitCode::from(EXIT_OK))
}
