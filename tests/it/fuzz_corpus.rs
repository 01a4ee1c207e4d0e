//! Replays every stored fuzz corpus (fuzz/corpus/<target>/*) through its target,
//! so CI catches a regression without running a fuzzer.

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(
            outcome.is_ok(),
            "fuzz input {} breaks {target}",
            path.display()
        );
        count += 1;
    }
    assert!(count > 0, "no corpus for {target}");
}

#[test]
fn codec_corpus() {
    replay("codec", mcp_gateway::fuzzing::codec);
}

#[test]
fn envelope_corpus() {
    replay("envelope", mcp_gateway::fuzzing::envelope);
}

#[test]
fn config_corpus() {
    replay("config", mcp_gateway::fuzzing::config);
}

#[test]
fn mcp_id_corpus() {
    replay("mcp_id", mcp_gateway::fuzzing::mcp_id);
}

#[test]
fn http_head_corpus() {
    replay("http_head", mcp_gateway::fuzzing::http_head);
}

#[test]
fn http_response_corpus() {
    replay("http_response", mcp_gateway::fuzzing::http_response);
}
