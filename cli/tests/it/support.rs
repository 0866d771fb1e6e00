//! Running the binary and finding inputs.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `sessionlog` with `args`.
pub fn sessionlog(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(args)
        .output()
        .expect("the sessionlog binary runs")
}

/// Runs `sessionlog` with `args` and `SESSIONLOG_DB` pointing at `db`.
pub fn with_db(db: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(args)
        .env("SESSIONLOG_DB", db)
        .output()
        .expect("the sessionlog binary runs")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

/// Starts `sessionlog serve --db DB` on a free loopback port; the child and the address it
/// printed.
pub fn start_serve(db: &str) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(["serve", "--db", db, "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the sessionlog binary runs");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("serve prints its address");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("serve printed {line:?}"))
        .to_owned();
    (child, addr)
}

/// One HTTP/1.1 request over a fresh connection: the status code and the body, or `None`
/// when the server is gone.
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// `../shared/fixtures/dsh` beside the workspace, or `None` (with a note) on a fresh clone.
pub fn fixtures_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/dsh");
    if dir.join("MANIFEST.tsv").is_file() {
        return Some(dir);
    }
    eprintln!(
        "skipping: {} is missing (the dsh fixtures live beside the checkout)",
        dir.display()
    );
    None
}

/// `(path, expect)` for every manifest row.
pub fn manifest(dir: &std::path::Path) -> Vec<(PathBuf, String)> {
    let text = std::fs::read_to_string(dir.join("MANIFEST.tsv")).expect("manifest is readable");
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let cells: Vec<&str> = line.split('\t').collect();
            (dir.join(cells[0]), cells[2].to_owned())
        })
        .collect()
}

/// Writes `text` to a new file in `dir`.
pub fn write_file(dir: &std::path::Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("the temporary directory is writable");
    path
}
