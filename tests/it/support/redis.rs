//! Debian's redis-server, started on a free loopback port for a test.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server of this test's own; killed (by its pid) when dropped.
pub(crate) struct Redis {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl Redis {
    pub(crate) fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut r = Redis {
            child: None,
            port,
            dir: tempfile::tempdir().unwrap(),
        };
        r.restart();
        r
    }

    /// Starts it (again) on its port, and waits until it answers.
    pub(crate) fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is needed (Debian: apt-get install redis-server; tests/run.sh installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: gone at once, as a crashed store is.
    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP: it takes connections and answers nothing, as a store that
    /// hangs does; [`Self::resume`] ends that.
    pub(crate) fn pause(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
    }

    pub(crate) fn resume(&self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = self.child.as_ref().expect("running").id();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap();
    }

    /// FLUSHALL: the store loses every key, as one restarted without
    /// persistence does.
    pub(crate) fn flush_all(&self) {
        let client = redis::Client::open(self.url()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}
