//! `sessionlog`: the operator command line. It parses arguments, calls one engine function per
//! command, and prints; the contract is `shared/CLI.md` (grammar, exit codes, `--json` shapes).

mod audit_command;
mod commands;
mod compact_command;
mod demo_command;
mod diff_command;
mod migrate_command;
mod output;
mod prompt_command;
mod requests_command;
mod run_command;
mod salvage_command;
mod serve_command;
mod show_command;
mod store_commands;
mod tokens_command;

use std::process::ExitCode;

use clap::Parser;

use crate::commands::Cli;

/// mimalloc instead of the system allocator: decoding JSON builds many small strings and
/// vectors, and glibc's malloc spent about half of `migrate`'s time in its free-list upkeep.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    let cli = Cli::parse();
    match commands::run(cli) {
        Ok(code) => code,
        Err(error) if output::is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sessionlog: {}", output::error_text(&error));
            ExitCode::from(output::exit_code_of(&error))
        }
    }
}

/// A reader that closes stdout early (`| head`) ends a view quietly, with success: `println!`
/// panics on a closed pipe (Rust ignores SIGPIPE), so the hook turns exactly that panic into
/// exit 0 and leaves every other panic to the default hook. Commands whose output must be
/// whole (`export -o -`) write through `io::Write` and report the closed pipe as a failure.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        // EPIPE is os error 32 on the platforms we build for.
        if text.starts_with("failed printing to stdout") && text.contains("(os error 32)") {
            std::process::exit(0);
        }
        default(info);
    }));
}
