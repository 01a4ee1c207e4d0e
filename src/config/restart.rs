//! What of a new configuration a running gateway cannot apply without a
//! restart: compared with what it started with, less what the command line
//! fixed (its listeners, the connection caps the descriptor limit set), so
//! that a reload names exactly the settings it left as they were.

use super::{Config, GatewaySettings};
use crate::telemetry::traces::TracesFile;

/// The settings that differ between `running` (and the `traces` it started
/// with) and `next`, and that only a restart applies, by their names in the file.
pub fn unapplied(
    running: &GatewaySettings,
    traces: &TracesFile,
    next: &Config,
) -> Vec<&'static str> {
    let mut next_gateway = next.gateway.clone();
    let fixed = running.fixed;
    if fixed.listen {
        next_gateway.listen = running.listen;
    }
    if fixed.admin_listen {
        next_gateway.admin_listen = running.admin_listen;
    }
    if let Some(room) = fixed.connections {
        let limits = &mut next_gateway.limits;
        limits.max_connections = limits.max_connections.min(room);
        limits.max_connections_per_tenant = limits.max_connections_per_tenant.min(room);
    }
    let n = &next_gateway;
    [
        ("gateway.listen", n.listen != running.listen),
        (
            "gateway.admin_listen",
            n.admin_listen != running.admin_listen,
        ),
        (
            "gateway.limits",
            format!("{:?}", n.limits) != format!("{:?}", running.limits),
        ),
        (
            "gateway.shutdown_timeout_ms",
            n.shutdown_timeout != running.shutdown_timeout,
        ),
        (
            "gateway.server_request_timeout_ms",
            n.server_request_timeout != running.server_request_timeout,
        ),
        (
            "gateway.allowed_origins",
            n.allowed_origins != running.allowed_origins,
        ),
        (
            "gateway.tool_name_budget",
            n.tool_name_budget != running.tool_name_budget,
        ),
        (
            "gateway.session_secret",
            n.session_key != running.session_key,
        ),
        ("gateway.store", n.store != running.store),
        (
            "gateway.reload_poll_ms",
            n.reload_poll != running.reload_poll,
        ),
        ("telemetry.traces", next.traces != *traces),
    ]
    .into_iter()
    .filter_map(|(name, changed)| changed.then_some(name))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Fixed, SystemSecrets};

    fn config(gateway: &str) -> Config {
        let yaml = format!(
            "gateway: {{id: gw, {gateway}}}\nupstreams: {{}}\ntenants:\n  a: {{api_keys: [k], upstreams: []}}\n"
        );
        Config::from_yaml(&yaml, &SystemSecrets::default()).unwrap()
    }

    #[test]
    fn a_reload_names_what_it_left_and_not_what_the_command_line_fixed() {
        let mut running = config("listen: \"127.0.0.1:1\", limits: {max_connections: 100}");
        // serve --listen 127.0.0.1:9, and a descriptor limit that left room for 50.
        running.gateway.listen = "127.0.0.1:9".parse().unwrap();
        running.gateway.limits.max_connections = 50;
        running.gateway.limits.max_connections_per_tenant =
            running.gateway.limits.max_connections_per_tenant.min(50);
        running.gateway.fixed = Fixed {
            listen: true,
            admin_listen: false,
            connections: Some(50),
        };
        let same = config("listen: \"127.0.0.1:1\", limits: {max_connections: 100}");
        assert!(unapplied(&running.gateway, &running.traces, &same).is_empty());
        let changed = config(
            "listen: \"127.0.0.1:2\", admin_listen: \"127.0.0.1:3\", limits: {max_connections: 100}, store: {url: \"redis://127.0.0.1:6379/0\"}, reload_poll_ms: 10",
        );
        assert_eq!(
            unapplied(&running.gateway, &running.traces, &changed),
            [
                "gateway.admin_listen",
                "gateway.store",
                "gateway.reload_poll_ms"
            ]
        );
    }
}
