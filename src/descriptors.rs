//! File descriptors: every connection, upstream socket and child's pipe
//! takes one, and a process out of them cannot accept a connection. At
//! start the soft limit is raised to the hard one (as Go's runtime and
//! most servers do), and the listeners' connection caps are kept within
//! what the limit leaves after a reserve for upstreams, children and the
//! log, so that agents past the cap wait in the backlog instead of taking
//! the descriptors the gateway needs to answer the ones it holds.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Connections the admin listener holds at most (probes and scrapes).
pub const ADMIN_CONNECTIONS: usize = 64;

/// Raises the soft limit on open descriptors to the hard limit; returns the
/// limit in force afterwards (`None` when it cannot be read).
pub fn raise_limit() -> Option<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return Some(hard);
    }
    Some(soft)
}

/// The agent connections a process with `limit` descriptors may hold:
/// what is left after the admin listener's connections and a reserve of
/// an eighth of the limit (at least 64) for everything else.
pub fn agent_connections(limit: u64) -> usize {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let reserve = (limit / 8).max(64);
    limit.saturating_sub(reserve + ADMIN_CONNECTIONS).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_leave_a_reserve() {
        assert_eq!(agent_connections(1024), 1024 - 128 - 64);
        assert_eq!(agent_connections(256), 256 - 64 - 64);
        assert_eq!(agent_connections(100), 1);
        assert_eq!(agent_connections(1 << 20), (1 << 20) - (1 << 17) - 64);
    }
}
