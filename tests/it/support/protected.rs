//! The protected upstream of the tests of upstream credentials: the
//! official Python SDK's server (tests/fixtures/protected_server.py) that
//! takes only bearer tokens of the authorization server it is told to
//! trust, and logs the claims of each token it accepted.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::{Server, root, start_server, venv};

pub(crate) struct Protected {
    _server: Server,
    pub(crate) url: String,
    issuer: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Protected {
    /// Started with these arguments of its own (`--stateful`,
    /// `--reject-first N`); it trusts no issuer until [`Protected::trust`].
    pub(crate) fn start(args: &[&str]) -> Protected {
        let dir = tempfile::tempdir().unwrap();
        let (issuer, log) = (dir.path().join("issuer"), dir.path().join("tokens.jsonl"));
        let mut cmd = Command::new(venv().join("bin/python"));
        cmd.arg(root().join("tests/fixtures/protected_server.py"))
            .arg(&issuer)
            .arg(&log)
            .args(args);
        let server = start_server(cmd, "PORT ", false);
        Protected {
            url: server.url.clone(),
            _server: server,
            issuer,
            log,
            _dir: dir,
        }
    }

    /// From now on it takes the tokens of this issuer (its identifier, and
    /// on a second line where its keys are when it publishes no metadata).
    pub(crate) fn trust(&self, issuer: &str) {
        std::fs::write(&self.issuer, issuer).unwrap();
    }

    /// The claims of every token it accepted, in order.
    pub(crate) fn accepted(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}
