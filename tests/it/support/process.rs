//! The real binary as a process, its JSON log lines read on a thread.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use super::*;

/// A gateway process whose JSON log lines are read on a thread.
pub(crate) struct Process {
    pub(crate) child: Child,
    pub(crate) logs: mpsc::Receiver<Value>,
    pub(crate) seen: Vec<Value>,
}

impl Process {
    pub(crate) fn spawn(args: &[&str]) -> Process {
        Self::spawn_with_env(args, &[])
    }

    pub(crate) fn spawn_with_env(args: &[&str], env: &[(&str, &str)]) -> Process {
        Self::spawn_command(Command::new(BIN), args, env)
    }

    /// `command` (the binary, or a wrapper that runs it) with `args` and the
    /// test's listeners and log format.
    pub(crate) fn spawn_command(
        mut command: Command,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Process {
        let mut child = command
            .args(args)
            .envs(env.iter().copied())
            .args([
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
                "--log-format",
                "json",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, logs) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let v = serde_json::from_str(&line).unwrap_or_else(|_| json!({"unparsed": line}));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Process {
            child,
            logs,
            seen: Vec::new(),
        }
    }

    /// Every log line read so far.
    pub(crate) fn seen(&self) -> &[Value] {
        &self.seen
    }

    /// Every log line read so far, as text.
    pub(crate) fn seen_text(&self) -> String {
        self.seen.iter().map(|v| format!("{v}\n")).collect()
    }

    /// Waits for a log line matching `pred`.
    pub(crate) fn wait_log(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(v) = self.seen.iter().find(|v| pred(v)) {
            return v.clone();
        }
        loop {
            match self.logs.recv_timeout(Duration::from_secs(20)) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if pred(&v) {
                        return v;
                    }
                }
                Err(_) => panic!("no log line for {what}; saw {:#?}", self.seen),
            }
        }
    }

    pub(crate) fn addr(&mut self, message: &str) -> String {
        let line = self.wait_log(message, |v| v["message"] == message);
        line["addr"].as_str().unwrap().to_owned()
    }

    /// Sends a signal (`-TERM`, `-HUP`) to the gateway process.
    pub(crate) fn signal(&self, sig: &str) {
        let sent = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill {sig} failed");
    }

    /// SIGTERM, then waits for the exit and for the last log lines.
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        self.signal("-TERM");
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().unwrap() {
                while let Ok(v) = self.logs.recv_timeout(Duration::from_secs(5)) {
                    self.seen.push(v);
                }
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child.kill().unwrap();
        panic!("the gateway did not exit after SIGTERM");
    }
}

impl Drop for Process {
    /// A test that failed midway still ends the gateway it started.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Children of every thread of `pid` (a child belongs to the thread that spawned it).
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(Result::ok)
        .flat_map(|task| {
            std::fs::read_to_string(task.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}
