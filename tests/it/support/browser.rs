//! A real headless browser for the tests of what a person sees: Debian's
//! Chromium driven by Playwright for Python (tests/fixtures/browser_driver.py,
//! in target/mcp-venv at the version tests/fixtures/mcp-servers.txt pins),
//! one page, one JSON command a line.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::{root, servers, venv};

/// The longest a command may take before the test fails: well past the
/// driver's own limits (10 s a wait, 20 s a navigation), so its answer,
/// an error included, comes first. Real time: not for a test with paused time.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// The driver process, with its browser, context and page. Killed when
/// dropped; its Playwright driver then closes Chromium.
pub(crate) struct Browser {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Browser {
    /// A browser with JavaScript, ready (it answered).
    pub(crate) async fn start() -> Browser {
        Self::spawn(&[]).await
    }

    /// A browser whose context runs no JavaScript: what a page is without it.
    pub(crate) async fn start_no_js() -> Browser {
        Self::spawn(&["--no-js"]).await
    }

    async fn spawn(args: &[&str]) -> Browser {
        servers();
        let mut child = Command::new(venv().join("bin/python"))
            .arg(root().join("tests/fixtures/browser_driver.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("the browser driver (run tests/run.sh)");
        let mut browser = Browser {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            child,
        };
        browser.cmd(json!({"op": "url"})).await.unwrap_or_else(|e| {
            panic!("the browser driver did not start: {e} (Debian: apt-get install chromium)")
        });
        browser
    }

    /// One command (`{"op": ..., ...}`): the driver's whole answer when it
    /// says ok, else its error. Panics when the driver is gone or silent
    /// for 60 s, so that a test never hangs.
    pub(crate) async fn cmd(&mut self, c: Value) -> Result<Value, String> {
        let line = tokio::time::timeout(ANSWER_WITHIN, async {
            self.stdin
                .write_all(format!("{c}\n").as_bytes())
                .await
                .unwrap_or_else(|e| panic!("the browser driver is gone ({e}), at {c}"));
            self.stdin.flush().await.unwrap();
            self.stdout.next_line().await
        })
        .await
        .unwrap_or_else(|_| panic!("the browser driver gave no answer within 60 s to {c}"))
        .unwrap_or_else(|e| panic!("reading the browser driver: {e}"))
        .unwrap_or_else(|| panic!("the browser driver exited (its stderr is above), at {c}"));
        let answer: Value = serde_json::from_str(&line)
            .unwrap_or_else(|_| panic!("not JSON from the browser driver: {line}"));
        if answer["ok"] == true {
            Ok(answer)
        } else {
            Err(answer["error"].as_str().unwrap_or(&line).to_owned())
        }
    }

    /// `cmd`, whose failure fails the test.
    async fn must(&mut self, c: Value) -> Value {
        let op = c["op"].clone();
        self.cmd(c)
            .await
            .unwrap_or_else(|e| panic!("browser {op}: {e}"))
    }

    /// Loads `url` (until its `load` event): the status of the response.
    pub(crate) async fn goto(&mut self, url: &str) -> Result<u16, String> {
        let answer = self.cmd(json!({"op": "goto", "url": url})).await?;
        status(&answer)
    }

    /// The page's URL now.
    pub(crate) async fn url(&mut self) -> String {
        let answer = self.must(json!({"op": "url"})).await;
        answer["url"].as_str().unwrap().to_owned()
    }

    /// Types `value` into the first element matching `selector` (a
    /// Playwright selector: CSS such as `[data-testid=name]`).
    pub(crate) async fn fill(&mut self, selector: &str, value: &str) {
        self.must(json!({"op": "fill", "selector": selector, "value": value}))
            .await;
    }

    /// Clicks the first element matching `selector` (once it is visible and enabled).
    pub(crate) async fn click(&mut self, selector: &str) {
        self.must(json!({"op": "click", "selector": selector}))
            .await;
    }

    /// Clicks, and waits for the navigation the click causes to load.
    pub(crate) async fn click_nav(&mut self, selector: &str) {
        self.must(json!({"op": "click", "selector": selector, "navigates": true}))
            .await;
    }

    /// Waits (up to 10 s) until an element matching `selector` is visible.
    pub(crate) async fn wait(&mut self, selector: &str) -> Result<(), String> {
        self.cmd(json!({"op": "wait", "selector": selector}))
            .await
            .map(drop)
    }

    /// Waits (up to `within_ms`) until the first element matching
    /// `selector` has attribute `name` equal to `value`.
    pub(crate) async fn wait_attr(
        &mut self,
        selector: &str,
        name: &str,
        value: &str,
        within_ms: u64,
    ) -> Result<(), String> {
        let c = json!({"op": "wait_attr", "selector": selector, "name": name, "value": value, "timeout_ms": within_ms});
        self.cmd(c).await.map(drop)
    }

    /// The rendered text of the first element matching `selector` (which must exist now).
    pub(crate) async fn text(&mut self, selector: &str) -> String {
        let answer = self.must(json!({"op": "text", "selector": selector})).await;
        answer["text"].as_str().unwrap().to_owned()
    }

    /// Attribute `name` of the first element matching `selector` (which
    /// must exist now); None when it has no such attribute.
    pub(crate) async fn attr(&mut self, selector: &str, name: &str) -> Option<String> {
        let answer = self
            .must(json!({"op": "attr", "selector": selector, "name": name}))
            .await;
        answer["value"].as_str().map(str::to_owned)
    }

    /// How many elements match `selector` now.
    pub(crate) async fn count(&mut self, selector: &str) -> usize {
        let answer = self
            .must(json!({"op": "count", "selector": selector}))
            .await;
        answer["count"].as_u64().unwrap() as usize
    }

    /// The page's DOM, serialized (as scripts have left it).
    pub(crate) async fn html(&mut self) -> String {
        let answer = self.must(json!({"op": "html"})).await;
        answer["html"].as_str().unwrap().to_owned()
    }

    /// The context's cookies as Playwright gives them: `name`, `value`,
    /// `domain`, `path`, `expires` (-1 for a session cookie), `httpOnly`,
    /// `secure`, `sameSite` ("Strict", "Lax" or "None").
    pub(crate) async fn cookies(&mut self) -> Vec<Value> {
        let answer = self.must(json!({"op": "cookies"})).await;
        answer["cookies"].as_array().unwrap().clone()
    }

    /// Every request of the page since the start (or `clear_network`), in
    /// order, each hop of a redirect apart: `url`, `method`, `resource_type`,
    /// `request_headers`, `status`, `response_headers` (names in lower case;
    /// several `set-cookie` joined with "\n"), `body` (text types only, up
    /// to 1 MB), `finished` (false while a stream is open), `failure`.
    pub(crate) async fn network(&mut self) -> Vec<Value> {
        let answer = self.must(json!({"op": "network"})).await;
        answer["entries"].as_array().unwrap().clone()
    }

    /// A PNG of the whole page at `path`.
    pub(crate) async fn screenshot(&mut self, path: &Path) {
        let path = path.to_str().expect("a UTF-8 path");
        self.must(json!({"op": "screenshot", "path": path, "full_page": true}))
            .await;
    }

    /// The console messages and uncaught errors of the page so far (CSP
    /// violations among them): `type` ("log", "error", ..., "pageerror"),
    /// `text`, `url`, `line`.
    pub(crate) async fn console(&mut self) -> Vec<Value> {
        let answer = self.must(json!({"op": "console"})).await;
        answer["messages"].as_array().unwrap().clone()
    }

    /// The tab hidden or shown, as the page's script sees it: emulated
    /// (`document.visibilityState`, `document.hidden` and a
    /// `visibilitychange` event; until the next navigation).
    pub(crate) async fn set_hidden(&mut self, hidden: bool) {
        self.must(json!({"op": "visibility", "hidden": hidden}))
            .await;
    }

    /// Closes the browser and waits for the driver to exit.
    pub(crate) async fn quit(mut self) {
        self.must(json!({"op": "quit"})).await;
        let exited = tokio::time::timeout(ANSWER_WITHIN, self.child.wait()).await;
        assert!(
            exited.is_ok_and(|s| s.is_ok_and(|s| s.success())),
            "the browser driver did not exit cleanly"
        );
    }
}

/// The status of a navigation's answer; none for a same-document one.
fn status(answer: &Value) -> Result<u16, String> {
    answer["status"]
        .as_u64()
        .map(|s| s as u16)
        .ok_or_else(|| format!("no response (a same-document navigation?): {answer}"))
}
