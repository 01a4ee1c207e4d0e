//! The README as a newcomer uses it: every snippet run against the real
//! binary on its embedded demo (the curl commands, the Python and TypeScript
//! SDK clients, both desktop-host configs, the config example), each naming
//! its file and the versions it was tested with; every link of the README and
//! of `docs/` resolved, anchors included, and none pointing outside the
//! repository; MCP v1.0 explained in `docs/mcp-v1.md`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

/// The fenced blocks of a markdown text: (info string, text).
fn blocks(markdown: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in markdown.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => open = Some((info.trim().to_owned(), String::new())),
            (Some(_), Some(_)) => out.extend(open.take()),
            (Some((_, text)), None) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(markdown: &str) -> Vec<String> {
    let mut in_block = false;
    markdown
        .lines()
        .filter(|l| {
            if l.starts_with("```") {
                in_block = !in_block;
            }
            !in_block
        })
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

/// The targets of a text's markdown links, outside code blocks.
fn links(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let Some(end) = tail.find(')') else { break };
            out.push(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    out
}

fn docs() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md"), root().join("ARCHITECTURE.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files
}

#[test]
fn every_link_in_the_readme_and_docs_resolves() {
    let mut broken = Vec::new();
    for file in docs() {
        let text = std::fs::read_to_string(&file).unwrap();
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let linked = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !linked.exists() {
                broken.push(format!("{}: {target} (no such file)", file.display()));
                continue;
            }
            if !anchor.is_empty() {
                let there = std::fs::read_to_string(&linked).unwrap_or_default();
                if !anchors(&there).iter().any(|a| a == anchor) {
                    broken.push(format!("{}: {target} (no such heading)", file.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn no_doc_points_outside_the_repository() {
    let mut outside = Vec::new();
    for file in docs() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.contains("../shared") {
                outside.push(format!("{}:{}: {line}", file.display(), n + 1));
            }
        }
    }
    assert!(
        outside.is_empty(),
        "files outside the repository named:\n{}",
        outside.join("\n")
    );
}

#[test]
fn the_repository_explains_mcp_v1_itself() {
    let text = std::fs::read_to_string(root().join("docs/mcp-v1.md")).unwrap();
    for needed in [
        "## Messages: JSON-RPC 2.0",
        "## The handshake and capabilities",
        "## Methods",
        "## Notifications",
        "### stdio",
        "### HTTP",
        "## Errors",
        "`mcp/listTools`",
        "`mcp/listResources`",
        "`mcp/listPrompts`",
        "`mcp/executeTool`",
        "`mcp/resourceDidChange`",
        "`$/logTrace`",
        "`executionProvider`",
    ] {
        assert!(text.contains(needed), "docs/mcp-v1.md lacks {needed}");
    }
    // Its framed examples: each Content-Length the byte count of its body.
    let mut frames = 0;
    for line in text.lines() {
        let Some((_, frame)) = line.split_once("Content-Length: ") else {
            continue;
        };
        let Some((length, body)) = frame.split_once(r"\r\n\r\n") else {
            continue;
        };
        if let Ok(length) = length.parse::<usize>() {
            assert_eq!(length, body.len(), "{line}");
            assert!(serde_json::from_str::<Value>(body).unwrap().is_object());
            frames += 1;
        }
    }
    assert!(frames >= 3, "{frames} framed examples");
}

#[test]
fn the_protocol_docs_call_tools_the_demo_serves() {
    use mcp_gateway::modelcontext::names::tool_name;
    let text = std::fs::read_to_string(root().join("docs/model-context-protocol.md")).unwrap();
    // The table of the demo's names, as the gateway makes them (48: the
    // default budget).
    for upstream in ["local", "remote"] {
        for own in ["tools/add:v1", "tools/echo:v1", "prompts/greeting"] {
            let name = tool_name(upstream, &format!("mcp://{upstream}/{own}"), 48);
            assert!(text.contains(&format!("| `{name}` |")), "{name}");
        }
    }
    let add = tool_name("local", "mcp://local/tools/add:v1", 48);
    let clients: Vec<String> = blocks(&text)
        .into_iter()
        .filter(|(info, _)| matches!(info.as_str(), "python" | "js"))
        .map(|(_, snippet)| snippet)
        .collect();
    assert_eq!(clients.len(), 2);
    for snippet in clients {
        assert!(snippet.contains("Bearer demo-key"), "{snippet}");
        assert!(snippet.contains(&format!("\"{add}\"")), "{snippet}");
    }
}

/// The README's blocks of one info string.
fn readme(info: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    blocks(&text)
        .into_iter()
        .filter(|(i, _)| i == info)
        .map(|(_, t)| t)
        .collect()
}

/// The embedded demo, as `cargo run --release -- serve` runs it, on free
/// ports: the process and the snippet text with its addresses swapped in.
fn demo() -> (Process, impl Fn(&str) -> String) {
    let mut p = Process::spawn(&["serve"]);
    let agent = p.addr("agent listener bound");
    let admin = p.addr("admin listener bound");
    for upstream in ["local", "remote"] {
        p.wait_log(upstream, |v| {
            v["message"] == "upstream ready" && v["upstream"] == upstream
        });
    }
    let swap = move |snippet: &str| {
        snippet
            .replace("127.0.0.1:8080", &agent)
            .replace("localhost:8080", &agent)
            .replace("localhost:9090", &admin)
    };
    (p, swap)
}

#[test]
fn the_curl_snippets_answer_as_the_readme_says() {
    let (mut p, swap) = demo();
    let curls: Vec<String> = readme("sh")
        .into_iter()
        .filter(|s| s.contains("curl"))
        .collect();
    assert!(!curls.is_empty());
    for snippet in curls {
        let out = Command::new("bash")
            .arg("-c")
            .arg(swap(&snippet))
            .output()
            .unwrap();
        assert!(out.status.success(), "{snippet}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        // Each answer the snippet shows is the one given.
        for shown in snippet.lines().filter_map(|l| l.strip_prefix("# {")) {
            assert!(
                stdout.contains(&format!("{{{shown}")),
                "{shown} not in {stdout}"
            );
        }
        assert!(
            stdout.contains("mcp://gateway/local/local/tools/add:v1"),
            "{stdout}"
        );
    }
    assert!(p.terminate().success());
}

#[test]
fn the_sdk_snippets_run_against_the_demo_and_a_listen_outlives_the_keep_alive() {
    servers();
    let (mut p, swap) = demo();
    let dir = tempfile::tempdir().unwrap();
    // Python: its answer, then a listen that must stay open (httpx's default
    // read timeout is 5 s; the run lasts longer than two of them).
    let [python] = &readme("python")[..] else {
        panic!("one Python snippet")
    };
    let script = dir.path().join("snippet.py");
    std::fs::write(&script, swap(python)).unwrap();
    let mut child = Command::new(venv().join("bin/python"))
        .arg("-u")
        .arg(&script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("an answer").unwrap();
    assert_eq!(first, "{'sum': 5.0}");
    let listening = Instant::now();
    while listening.elapsed() < Duration::from_secs(12) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the listen ended: {}",
            std::io::read_to_string(child.stderr.take().unwrap()).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill();
    let _ = child.wait();
    // TypeScript, with the pinned SDK.
    let [js] = &readme("js")[..] else {
        panic!("one TypeScript snippet")
    };
    let module = root().join("target/mcp-node/client.mjs");
    std::fs::write(&module, swap(js)).unwrap();
    let out = Command::new("node").arg(&module).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "{ sum: 5 }");
    assert!(p.terminate().success());
}

/// The version `tests/fixtures/mcp-servers.txt` pins for `package`.
fn pinned(package: &str) -> String {
    let pins = std::fs::read_to_string(root().join("tests/fixtures/mcp-servers.txt")).unwrap();
    let (pip, npm) = (format!("pip {package}=="), format!("npm {package}@"));
    pins.lines()
        .find_map(|l| {
            l.strip_prefix(pip.as_str())
                .or_else(|| l.strip_prefix(npm.as_str()))
        })
        .unwrap_or_else(|| panic!("{package} is not pinned"))
        .to_owned()
}

#[test]
fn the_snippets_say_their_file_type_and_versions() {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let said = [
        "save it as `client.mjs`".to_owned(),
        "run `node client.mjs`".to_owned(),
        format!(
            "npm install @modelcontextprotocol/sdk@{}",
            pinned("@modelcontextprotocol/sdk")
        ),
        format!("`mcp=={}`", pinned("mcp")),
        "npx @modelcontextprotocol/inspector@latest".to_owned(),
        "It needs Node.js 22 or later".to_owned(),
    ];
    for s in said {
        assert!(text.contains(&s), "the README does not say: {s}");
    }
    // Each SDK snippet names its file on its first line.
    for (info, file) in [("python", "# client.py"), ("js", "// client.mjs")] {
        let [snippet] = &readme(info)[..] else {
            panic!("one {info} snippet")
        };
        assert_eq!(snippet.lines().next(), Some(file));
    }
}

/// A host's handshake with `mcp-gateway` run with these arguments.
fn stdio_host_handshake(args: &[String]) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}});
    writeln!(stdin, "{init}").unwrap();
    let line = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .next()
        .unwrap()
        .unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-06-18",
        "{answer}"
    );
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn the_host_configs_reach_the_gateway_both_ways() {
    let configs: Vec<Value> = readme("json")
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    let servers: Vec<&Value> = configs
        .iter()
        .map(|c| &c["mcpServers"]["gateway"])
        .collect();
    // The stdio ones (the demo's, and one with a config whose keys name
    // variables the host does not set): their command and args, with this
    // binary.
    let stdio: Vec<&&Value> = servers
        .iter()
        .filter(|s| s.get("command").is_some())
        .collect();
    assert_eq!(stdio.len(), 2, "the demo's and a team's stdio host configs");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.yaml");
    std::fs::write(
        &config,
        json!({
            "gateway": {"session_secret": "env:UNSET_SESSION_SECRET"},
            "upstreams": {"local": stdio_upstream("local", &[])},
            "tenants": {"acme": {"api_keys": ["env:UNSET_ACME_KEY"], "upstreams": ["local"]}},
        })
        .to_string(),
    )
    .unwrap();
    for stdio in stdio {
        let args: Vec<String> = stdio["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                a.as_str()
                    .unwrap()
                    .replace("/etc/mcp-gateway/gateway.yaml", config.to_str().unwrap())
            })
            .collect();
        assert_eq!(stdio["command"], "/usr/local/bin/mcp-gateway");
        stdio_host_handshake(&args);
    }
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}});
    // The HTTP one: its URL and headers against the demo.
    let http = servers
        .iter()
        .find(|s| s.get("url").is_some())
        .expect("an HTTP host config");
    let (mut p, swap) = demo();
    let url = swap(http["url"].as_str().unwrap());
    let mut request = format!(
        "POST {} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\n",
        url.split_once("/mcp").map(|_| "/mcp").unwrap()
    );
    for (name, value) in http["headers"].as_object().unwrap() {
        request.push_str(&format!("{name}: {}\r\n", value.as_str().unwrap()));
    }
    let body = init.to_string();
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    let host = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let mut s = std::net::TcpStream::connect(host).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let out = std::io::read_to_string(s).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        out.to_ascii_lowercase().contains("mcp-session-id:"),
        "{out}"
    );
    assert!(p.terminate().success());
}

#[test]
fn the_readme_config_is_valid() {
    struct Env;
    impl mcp_gateway::config::Secrets for Env {
        fn var(&self, name: &str) -> Option<String> {
            match name {
                "ACME_KEY" => Some("a-key".into()),
                "ADMIN_TOKEN" => Some("an-admin-token".into()),
                "SEARCH_SECRET" | "TICKETS_SECRET" | "LOGIN_SECRET" => {
                    Some("a-client-secret".into())
                }
                "CONSENT_KEY" => Some("ab".repeat(32)),
                "SIGNING_KEY" => Some(crate::support::p256_pem()),
                "SESSION_SECRET" => Some("a-session-secret-of-at-least-32-characters".into()),
                _ => None,
            }
        }
        fn file(&self, _: &Path) -> Option<String> {
            None
        }
    }
    let yamls = readme("yaml");
    assert!(!yamls.is_empty());
    for yaml in yamls {
        mcp_gateway::config::Config::from_yaml(&yaml, &Env)
            .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    }
}
