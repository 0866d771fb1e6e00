//! A minimal W3C WebDriver client over reqwest, enough to drive headless Chromium through
//! chromedriver: open a page, run a script, type, click, take a screenshot.
//!
//! Written here rather than taken from a crate (fantoccini, thirtyfour) because the suite
//! needs six commands of a stable W3C protocol and reqwest is already a dev-dependency; a
//! client crate would add its own HTTP stack and a dozen transitive crates for them.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// Where Debian's `chromium` and `chromium-driver` put them (`.ci/run` installs both).
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// Longest wait for chromedriver to answer, and for a condition on the page.
const DRIVER_START_TIMEOUT: Duration = Duration::from_secs(20);
pub(crate) const WAIT_TIMEOUT: Duration = Duration::from_secs(60);

/// The browser binaries, or why there are none.
pub(crate) fn browser() -> Result<(PathBuf, PathBuf), String> {
    let chromium = std::env::var_os("SESSIONLOG_CHROMIUM").map_or(CHROMIUM.into(), PathBuf::from);
    let driver =
        std::env::var_os("SESSIONLOG_CHROMEDRIVER").map_or(CHROMEDRIVER.into(), PathBuf::from);
    for path in [&chromium, &driver] {
        if !path.exists() {
            return Err(format!("{} is missing", path.display()));
        }
    }
    Ok((chromium, driver))
}

/// chromedriver and one browser session; both end when this is dropped.
pub(crate) struct Browser {
    driver: Child,
    base: String,
    session: String,
    client: reqwest::Client,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and a headless Chromium of
    /// `width` x `height` pixels.
    pub(crate) async fn start(chromium: &Path, driver: &Path, width: u32, height: u32) -> Browser {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver.display()));
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let started = Instant::now();
        loop {
            let ready = client.get(format!("{base}/status")).send().await;
            if let Ok(response) = ready {
                let status: Value = response.json().await.unwrap_or_default();
                if status["value"]["ready"] == true {
                    break;
                }
            }
            assert!(
                started.elapsed() < DRIVER_START_TIMEOUT,
                "chromedriver did not start"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let capabilities = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium.display().to_string(),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--hide-scrollbars",
                    format!("--window-size={width},{height}")],
            },
        }}});
        let mut browser = Browser {
            driver: child,
            base,
            session: String::new(),
            client,
        };
        let created = browser.command("POST", "/session", capabilities).await;
        browser.session = created["sessionId"].as_str().unwrap().to_owned();
        browser
    }

    async fn command(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "GET" => self.client.get(url),
            "DELETE" => self.client.delete(url),
            _ => self.client.post(url).json(&body),
        };
        let response = request.send().await.unwrap();
        let status = response.status();
        let answer: Value = response.json().await.unwrap();
        assert!(status.is_success(), "webdriver {method} {path}: {answer}");
        answer["value"].clone()
    }

    fn at(&self, path: &str) -> String {
        format!("/session/{}{path}", self.session)
    }

    pub(crate) async fn goto(&self, url: &str) {
        self.command("POST", &self.at("/url"), json!({ "url": url }))
            .await;
    }

    /// Runs `script` (a function body; `arguments` are `args`) and returns its value.
    pub(crate) async fn eval(&self, script: &str, args: Value) -> Value {
        let body = json!({ "script": script, "args": args });
        self.command("POST", &self.at("/execute/sync"), body).await
    }

    /// Polls `script` until it returns something other than null or false.
    pub(crate) async fn wait_for(&self, what: &str, script: &str, args: Value) -> Value {
        let started = Instant::now();
        loop {
            let value = self.eval(script, args.clone()).await;
            if !value.is_null() && value != false {
                return value;
            }
            assert!(
                started.elapsed() < WAIT_TIMEOUT,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    async fn element(&self, css: &str) -> String {
        let body = json!({ "using": "css selector", "value": css });
        let found = self.command("POST", &self.at("/element"), body).await;
        let key = "element-6066-11e4-a52e-4f735466cecf";
        found[key]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_owned()
    }

    pub(crate) async fn click(&self, css: &str) {
        let element = self.element(css).await;
        let path = self.at(&format!("/element/{element}/click"));
        self.command("POST", &path, json!({})).await;
    }

    pub(crate) async fn type_into(&self, css: &str, text: &str) {
        let element = self.element(css).await;
        let path = self.at(&format!("/element/{element}/value"));
        self.command("POST", &path, json!({ "text": text })).await;
    }

    /// Writes a PNG of the viewport to `path`.
    pub(crate) async fn screenshot(&self, path: &Path) {
        let data = self
            .command("GET", &self.at("/screenshot"), Value::Null)
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap())
            .unwrap();
        std::fs::write(path, png).unwrap();
    }

    pub(crate) async fn close(mut self) {
        let path = self.at("");
        let _ = self
            .client
            .delete(format!("{}{path}", self.base))
            .send()
            .await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        self.session.clear();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A test that panicked before `close`: chromedriver (and with it Chromium) goes too.
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
