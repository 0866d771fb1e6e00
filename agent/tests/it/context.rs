//! Context as sourced user messages through the loop (#10): project instructions, the skill
//! catalog and invocations, and the notices that replace rewrites. Each test reads the
//! bodies the adapter was sent and the sources the log holds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::Value;
use sessionlog_agent::agent::deepseek::client::DeepSeekClient;
use sessionlog_agent::agent::deepseek::serialize::row_body;
use sessionlog_agent::agent::tools::PLAN_SECTION;
use sessionlog_agent::agent::turn::{model_switch_text, Agent, ContextOptions};
use sessionlog_agent::agent::CancelToken;
use sessionlog_agent::context::instructions::PRECEDENCE;
use sessionlog_agent::context::notices::{approval_text, plan_mode_text, working_directory_text};
use sessionlog_agent::context::skills::CATALOG_RULE;
use sessionlog_agent::prompt::capability::{Adapter, ModelInfo, PreparedCall, SystemPromptUpdate};
use sessionlog_engine::replay::SessionSource;
use sessionlog_engine::requests::{requests, RequestOptions};
use sessionlog_engine::show::{show, EntryBody, ShowOptions};
use sessionlog_engine::store::Store;
use sessionlog_format::Message;

use crate::loop_admission::{all_events, flash, messages, Answer, Scripted};
use crate::loopback::{done_chunks, tool_chunks, Reply, Server};
use crate::support::temp_store;

/// A workspace: a user-global directory, a repository with `.git`, instructions at its root
/// and in `packages/app` (the working directory), and two skills.
struct Workspace {
    _tmp: tempfile::TempDir,
    user: PathBuf,
    repo: PathBuf,
    app: PathBuf,
    skills: PathBuf,
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("dirs");
    std::fs::write(path, text).expect("a file");
}

fn workspace() -> Workspace {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let user = tmp.path().join("user");
    let repo = tmp.path().join("repo");
    let app = repo.join("packages").join("app");
    let skills = tmp.path().join("skills");
    std::fs::create_dir_all(repo.join(".git")).expect("a repo");
    write(&user.join("AGENTS.md"), "Global: answer in English.");
    write(&repo.join("AGENTS.md"), "Root: run the tests.");
    write(&app.join("AGENTS.md"), "App: keep it small.");
    write(
        &skills.join("review").join("SKILL.md"),
        "---\nname: review\ndescription: Reviews a change.\n---\nRead the diff, then comment.\n",
    );
    write(
        &skills.join("deploy").join("SKILL.md"),
        "# Deploy\nShips the build.\nRun make deploy.\n",
    );
    Workspace {
        _tmp: tmp,
        user,
        repo,
        app,
        skills,
    }
}

fn options(ws: &Workspace) -> ContextOptions {
    ContextOptions {
        user_dir: Some(ws.user.clone()),
        skill_dirs: vec![ws.skills.clone()],
        ..ContextOptions::default()
    }
}

fn agent<'a>(
    store: &'a Store,
    ws: &Workspace,
    cwd: &Path,
    answers: Vec<Answer>,
) -> (Agent<'a>, std::rc::Rc<std::cell::RefCell<Vec<Value>>>) {
    let (adapter, bodies) = Scripted::new(answers, Box::new(|_| {}));
    let agent = Agent::open(store, "s", Box::new(adapter), flash(), cwd)
        .expect("the agent opens")
        .with_context(options(ws))
        .expect("the context installs");
    (agent, bodies)
}

fn run(agent: &mut Agent<'_>, input: &str) {
    agent
        .run_turn(input, &CancelToken::new(), &mut |_| {})
        .expect("the turn runs");
}

/// `(source label, text)` of every injected message of the log, in order.
fn injected(store: &Store) -> Vec<(String, String)> {
    all_events(store)
        .iter()
        .filter_map(|e| e.message())
        .filter(|m| sessionlog_agent::context::is_injected(m))
        .map(|m| (label(m), text(m)))
        .collect()
}

fn label(message: &Message) -> String {
    message
        .source
        .as_ref()
        .map(sessionlog_agent::context::source_label)
        .unwrap_or_default()
}

fn text(message: &Message) -> String {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            sessionlog_format::ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect()
}

fn contents(body: &Value) -> Vec<String> {
    messages(body)
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

// Goal: on the first step the instructions arrive as one framed user message, broadest
// first (user-global, root, app), under the precedence opening, before the user's message;
// later turns add no second baseline; the log names the source.
#[test]
fn baseline_instructions_are_one_framed_user_message() {
    let ws = workspace();
    let (_dir, store) = temp_store();
    let (mut agent, bodies) = agent(&store, &ws, &ws.app, vec![Answer::Text("a"); 2]);
    run(&mut agent, "hello");
    run(&mut agent, "again");
    let bodies = bodies.borrow().clone();
    let first = messages(&bodies[0]);
    assert_eq!(first[1]["role"], "user");
    let baseline = first[1]["content"].as_str().unwrap_or_default().to_owned();
    let lines: Vec<&str> = baseline.lines().collect();
    assert_eq!(
        (lines[0], lines[1]),
        ("<system-reminder>", PRECEDENCE),
        "no budget note within budget"
    );
    assert!(baseline.ends_with("</system-reminder>"));
    let order: Vec<usize> = ["Global:", "Root:", "App:"]
        .iter()
        .map(|t| baseline.find(t).expect("every file"))
        .collect();
    assert!(order[0] < order[1] && order[1] < order[2]);
    let first_texts = contents(&bodies[0]);
    assert_eq!(first_texts.last().map(String::as_str), Some("hello"));
    let labels: Vec<String> = injected(&store).into_iter().map(|(l, _)| l).collect();
    assert_eq!(labels, vec!["agent-instructions/baseline", "skill-catalog"]);
    let second = contents(&bodies[1]);
    assert_eq!(
        second.len(),
        first_texts.len() + 2,
        "the reply and the new user message"
    );
}

// Goal: a small budget omits the broadest file and says so on the first line of the
// frame; a tiny one keeps only the most specific, cut at its end, and says how much.
// Method: budgets derived from the full rendering and from the most specific file alone.
#[test]
fn budget_through_the_loop() {
    use sessionlog_agent::context::instructions::{baseline_dirs, discover, render};

    let ws = workspace();
    write(
        &ws.user.join("AGENTS.md"),
        &format!("Global: {}", "g".repeat(400)),
    );
    write(
        &ws.app.join("AGENTS.md"),
        &format!("App: {}", "a".repeat(400)),
    );
    let files = discover(&baseline_dirs(Some(&ws.user), &ws.app));
    assert_eq!(files.len(), 3);
    let full = render(&files, PRECEDENCE, usize::MAX).text.len();
    let alone = render(&files[2..], PRECEDENCE, usize::MAX).text.len();
    for (budget, omitted, cut) in [(full - 1, 1, false), (alone - 100, 2, true)] {
        let (_dir, store) = temp_store();
        let (adapter, bodies) = Scripted::new(vec![Answer::Text("a")], Box::new(|_| {}));
        let mut agent = Agent::open(&store, "s", Box::new(adapter), flash(), &ws.app)
            .expect("opens")
            .with_context(ContextOptions {
                budget_bytes: budget,
                ..options(&ws)
            })
            .expect("context");
        run(&mut agent, "hello");
        let baseline = contents(&bodies.borrow()[0])[1].clone();
        assert!(baseline.len() <= budget, "{} > {budget}", baseline.len());
        let note = baseline.lines().nth(1).unwrap_or_default().to_owned();
        assert!(
            note.starts_with(&format!("Over the {budget}-byte")),
            "{note}"
        );
        assert_eq!(
            note.matches("AGENTS.md").count() - usize::from(cut),
            omitted
        );
        assert_eq!(note.contains("cut the last"), cut);
        assert!(!baseline.contains("Global:"));
        assert!(baseline.contains("App: aaa"));
        let events = all_events(&store);
        let source = events
            .iter()
            .filter_map(|e| e.message())
            .find_map(|m| m.source.clone().filter(|s| s.kind == "agent-instructions"))
            .expect("a baseline");
        assert_eq!(
            source.extra["omitted"].as_array().map(Vec::len),
            Some(omitted)
        );
        assert_eq!(source.extra.contains_key("cutBytes"), cut);
    }
}

// Goal: a read in a deeper directory adds its instructions once; a change to an announced
// file and a removal each append one note; an unchanged file adds nothing.
#[test]
fn nested_change_and_removal_notes() {
    let ws = workspace();
    write(&ws.app.join("src").join("AGENTS.md"), "Src: no unsafe.");
    write(&ws.app.join("src").join("lib.rs"), "fn main() {}");
    let (_dir, store) = temp_store();
    let answers = vec![
        Answer::Tool("read", r#"{"path":"src/lib.rs"}"#),
        Answer::Text("read it"),
        Answer::Tool("read", r#"{"path":"src/lib.rs"}"#),
        Answer::Text("read again"),
        Answer::Text("changed"),
        Answer::Text("removed"),
        Answer::Text("quiet"),
    ];
    let (mut agent, bodies) = agent(&store, &ws, &ws.app, answers);
    run(&mut agent, "read the lib");
    run(&mut agent, "read it again");
    write(&ws.repo.join("AGENTS.md"), "Root: run the tests twice.");
    run(&mut agent, "after a change");
    std::fs::remove_file(ws.app.join("src").join("AGENTS.md")).expect("removed");
    run(&mut agent, "after a removal");
    run(&mut agent, "nothing new");
    let labels: Vec<String> = injected(&store).into_iter().map(|(l, _)| l).collect();
    assert_eq!(
        labels,
        vec![
            "agent-instructions/baseline",
            "skill-catalog",
            "agent-instructions/nested",
            "agent-instructions/changed",
            "agent-instructions/removed",
        ]
    );
    let all = injected(&store);
    assert!(all[2].1.contains("Src: no unsafe."));
    assert!(all[3].1.contains("Root: run the tests twice."));
    assert!(all[4].1.contains("was removed"));
    let bodies = bodies.borrow().clone();
    let (before, after) = (messages(&bodies[5]), messages(&bodies[6]));
    assert_eq!(after[..before.len()], before[..], "notes only append");
}

// Goal: a write in a deeper directory adds that directory's instructions at the next step,
// after the tool result. Method: the model writes docs/notes.md where docs/ has AGENTS.md.
#[test]
fn write_in_a_deeper_directory_adds_its_instructions() {
    let ws = workspace();
    write(&ws.app.join("docs").join("AGENTS.md"), "Docs: plain words.");
    let (_dir, store) = temp_store();
    let answers = vec![
        Answer::Tool("write", r#"{"path":"docs/notes.md","text":"n"}"#),
        Answer::Text("written"),
    ];
    let (mut agent, bodies) = agent(&store, &ws, &ws.app, answers);
    run(&mut agent, "write the notes");
    assert_eq!(
        std::fs::read_to_string(ws.app.join("docs").join("notes.md"))
            .ok()
            .as_deref(),
        Some("n")
    );
    let bodies = bodies.borrow().clone();
    let second = messages(&bodies[1]);
    let (nested, rest) = second.split_last().expect("messages");
    assert_eq!(
        rest.last().map(|m| m["role"].clone()),
        Some(Value::from("tool"))
    );
    assert!(nested["content"]
        .as_str()
        .unwrap_or_default()
        .contains("Docs: plain words."));
    let labels: Vec<String> = injected(&store).into_iter().map(|(l, _)| l).collect();
    assert_eq!(
        labels.last().map(String::as_str),
        Some("agent-instructions/nested")
    );
}

// Goal: the catalog lists name and description under the load-first rule; a `/review` in
// the user message places the skill's full text after every other injection of the step
// (after the plan-mode notice too); the `skill` tool loads one by name.
#[test]
fn catalog_and_invocation_order() {
    let ws = workspace();
    let (_dir, store) = temp_store();
    let answers = vec![
        Answer::Text("reviewed"),
        Answer::Tool("skill", r#"{"name":"deploy"}"#),
        Answer::Text("deployed"),
    ];
    let (mut agent, bodies) = agent(&store, &ws, &ws.app, answers);
    agent.set_plan_mode(true).expect("plan on");
    run(&mut agent, "please /review this");
    run(&mut agent, "now deploy");
    let labels: Vec<String> = injected(&store).into_iter().map(|(l, _)| l).collect();
    assert_eq!(
        labels,
        vec![
            "agent-instructions/baseline",
            "skill-catalog",
            "plugin sessionlog-agent/plan-mode",
            "skill-invocation/review",
        ]
    );
    let bodies = bodies.borrow().clone();
    let first = contents(&bodies[0]);
    let n = first.len();
    assert_eq!(first[n - 3], "please /review this");
    assert_eq!(first[n - 2], plan_mode_text(true));
    assert!(first[n - 1].contains("Read the diff, then comment."));
    let catalog = &first[2];
    assert_eq!(
        catalog,
        &format!(
            "<system-reminder>\n{CATALOG_RULE}\n\n- deploy: Ships the build.\n- review: \
             Reviews a change.\n</system-reminder>"
        )
    );
    let tools: Vec<&str> = bodies[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(tools.contains(&"skill"));
    let loaded = messages(&bodies[2]);
    let result = loaded.last().expect("a tool result");
    assert_eq!(result["role"], "tool");
    assert!(result["content"]
        .as_str()
        .unwrap_or_default()
        .contains("Run make deploy."));
}

// Goal: plan mode on a capable route appends its section after the history and a notice
// after the user message, and leaves the tools array byte-identical; the approval-policy
// and working-directory changes each append one one-line notice.
#[test]
fn plan_mode_and_switch_notices() {
    let ws = workspace();
    let (_dir, store) = temp_store();
    let (mut agent, bodies) = agent(&store, &ws, &ws.app, vec![Answer::Text("a"); 4]);
    run(&mut agent, "one");
    agent.set_plan_mode(true).expect("plan on");
    run(&mut agent, "two");
    agent.set_approval_policy("never");
    run(&mut agent, "three");
    agent.set_working_directory(&ws.repo);
    run(&mut agent, "four");
    let bodies = bodies.borrow().clone();
    assert_eq!(
        serde_json::to_string(&bodies[0]["tools"]).expect("json"),
        serde_json::to_string(&bodies[1]["tools"]).expect("json")
    );
    let second = contents(&bodies[1]);
    let n = second.len();
    assert!(second[n - 3].contains(PLAN_SECTION), "the appended section");
    assert_eq!(messages(&bodies[1])[n - 3]["role"], "system");
    assert_eq!(
        second[n - 2..].to_vec(),
        vec!["two".to_owned(), plan_mode_text(true).to_owned()]
    );
    let third = contents(&bodies[2]);
    let k = third.len();
    assert_eq!(
        third[k - 2..].to_vec(),
        vec![approval_text("on-request", "never"), "three".to_owned()]
    );
    let fourth = contents(&bodies[3]);
    let w = fourth.len();
    assert_eq!(
        fourth[w - 2..].to_vec(),
        vec![working_directory_text(&ws.app, &ws.repo), "four".to_owned()]
    );
    for pair in bodies.windows(2) {
        let (a, b) = (messages(&pair[0]), messages(&pair[1]));
        assert_eq!(b[..a.len()], a[..]);
    }
}

/// Another DeepSeek model that declares in-history prompt updates.
fn flash_next() -> PreparedCall {
    let info = ModelInfo {
        provider: sessionlog_agent::prompt::capability::DEEPSEEK_PROVIDER.to_owned(),
        model: "deepseek-flash-next".to_owned(),
        input: Vec::new(),
        context_window: None,
        system_prompt_update: Some(SystemPromptUpdate::InHistory),
        tool_update: false,
    };
    PreparedCall::prepare(Adapter::DeepSeek, &info)
}

// Goal: against the loopback DeepSeek server, on an in-history route, instructions, the
// skill catalog, an invocation, plan mode, an instructions change, the approval and
// working-directory notices and a model switch never alter message 0 or the tools array:
// every body extends the previous one; `requests` rebuilds every body from the log and
// names each injected message's source, and `show` does too.
#[test]
fn loopback_keeps_message_zero_and_the_tools() {
    let ws = workspace();
    let replies = vec![
        Reply::Sse(done_chunks("one")),
        Reply::Sse(tool_chunks("c1", "plan_mode", "{\"active\":true}")),
        Reply::Sse(done_chunks("planned")),
        Reply::Sse(done_chunks("reviewed")),
        Reply::Sse(done_chunks("noted")),
        Reply::Sse(done_chunks("moved")),
        Reply::Sse(done_chunks("switched")),
    ];
    let server = Server::start(replies);
    let (_dir, store) = temp_store();
    let client = DeepSeekClient::new(&server.base, Some("k".into()), Duration::from_secs(5))
        .expect("a client");
    let mut agent = Agent::open(&store, "s", Box::new(client), flash(), &ws.app)
        .expect("opens")
        .with_context(options(&ws))
        .expect("context");
    run(&mut agent, "hello");
    run(&mut agent, "make a plan");
    run(&mut agent, "/review the plan");
    write(&ws.app.join("AGENTS.md"), "App: keep it smaller.");
    agent.set_approval_policy("never");
    run(&mut agent, "noted?");
    agent.set_working_directory(&ws.repo);
    run(&mut agent, "moved?");
    agent.set_route(flash_next());
    run(&mut agent, "switched?");
    drop(agent);
    let sent = server.bodies();
    assert_eq!(sent.len(), 7);
    for pair in sent.windows(2) {
        let (a, b) = (messages(&pair[0]), messages(&pair[1]));
        assert_eq!(b[0], a[0], "message 0 is untouched");
        assert_eq!(b[..a.len()], a[..], "only appended messages change");
        assert_eq!(
            serde_json::to_string(&pair[0]["tools"]).expect("json"),
            serde_json::to_string(&pair[1]["tools"]).expect("json"),
            "the tools array is byte-identical"
        );
    }
    let last = contents(&sent[6]);
    let notice = model_switch_text(
        "deepseek-official/deepseek-flash",
        "deepseek-official/deepseek-flash-next",
    );
    assert_eq!(last[last.len() - 2], notice);
    let report = requests(
        SessionSource::Store {
            store: &store,
            session: "s",
        },
        RequestOptions { bodies: true },
    )
    .expect("requests");
    let rebuilt: Vec<Value> = report.requests.iter().filter_map(row_body).collect();
    assert_eq!(rebuilt, sent);
    let named: Vec<String> = report.requests[6]
        .injected
        .iter()
        .map(|i| i.source.clone())
        .collect();
    assert_eq!(
        named,
        vec![
            "agent-instructions/baseline",
            "skill-catalog",
            "plugin sessionlog-agent/plan-mode",
            "skill-invocation/review",
            "plugin sessionlog-agent/approval-policy",
            "agent-instructions/changed",
            "plugin sessionlog-agent/working-directory",
            "plugin sessionlog-agent/model-switch",
        ]
    );
    let transcript = show(
        SessionSource::Store {
            store: &store,
            session: "s",
        },
        ShowOptions::default(),
    )
    .expect("show");
    let shown: Vec<String> = transcript
        .entries
        .iter()
        .filter_map(|e| match &e.body {
            EntryBody::Message(m) if m.source.contains('/') || m.source == "skill-catalog" => {
                Some(m.source.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(shown, named);
}

// Goal: a session resumed in another working directory appends one working-directory
// notice and that directory's instructions (its chain below the root), not a second
// baseline; a skill added between runs brings a new catalog, an unchanged set none.
// Method: a run in packages/app, then a reopened agent in packages/lib with a new skill,
// then a third agent with the same skills.
#[test]
fn resume_elsewhere_and_a_changed_catalog() {
    let ws = workspace();
    let lib = ws.repo.join("packages").join("lib");
    write(&lib.join("AGENTS.md"), "Lib: no panics.");
    let (_dir, store) = temp_store();
    let (mut first, _) = agent(&store, &ws, &ws.app, vec![Answer::Text("a")]);
    run(&mut first, "hello");
    drop(first);
    write(
        &ws.skills.join("lint").join("SKILL.md"),
        "---\nname: lint\ndescription: Lints.\n---\nRun the linter.\n",
    );
    let (mut second, bodies) = agent(&store, &ws, &lib, vec![Answer::Text("b")]);
    run(&mut second, "moved");
    drop(second);
    let (mut third, _) = agent(&store, &ws, &lib, vec![Answer::Text("c")]);
    run(&mut third, "again");
    drop(third);
    let labels: Vec<String> = injected(&store).into_iter().map(|(l, _)| l).collect();
    assert_eq!(
        labels,
        vec![
            "agent-instructions/baseline",
            "skill-catalog",
            "plugin sessionlog-agent/working-directory",
            "agent-instructions/nested",
            "skill-catalog",
        ]
    );
    let sent = contents(&bodies.borrow()[0]);
    let n = sent.len();
    assert_eq!(sent[n - 4], working_directory_text(&ws.app, &lib));
    assert!(sent[n - 3].contains("Lib: no panics."));
    assert!(
        !sent[n - 3].contains("Root:"),
        "the root was announced already"
    );
    assert!(sent[n - 2].contains("- lint: Lints."));
    assert_eq!(sent[n - 1], "moved");
}
