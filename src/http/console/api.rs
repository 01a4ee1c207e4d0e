//! The console's figures as JSON (`/ui/api/*`), which its pages show and
//! scripts read. Everything comes from what the gateway keeps: upstreams'
//! standing and catalogs, tenants' counters, the metrics' samples (see
//! `window`). Nothing secret is in it: no token, key, header or
//! environment value, argument or result.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use serde_json::{Value, json};

use super::Console;
use super::tools::ToolView;
use super::window::{self, RATE_WINDOW_S, WINDOW_S};
use crate::dispatch::Dispatcher;
use crate::tenant::Tenant;
use crate::upstream::Upstream;

/// An RFC 3339 time in UTC, to the second.
pub fn time(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// The reasons a tenant's requests are refused for (`requests_limited_total`).
const REFUSALS: [&str; 5] = [
    "rate_limited",
    "concurrency_limited",
    "sessions_limited",
    "session_in_flight_limited",
    "connections_limited",
];

fn rate(n: u64, seconds: f64) -> f64 {
    ((n as f64 / seconds) * 1000.0).round() / 1000.0
}

pub fn upstreams(d: &Dispatcher, c: &Console) -> Value {
    let tenants = d.tenants();
    let transports = c.transports.load();
    let now = c.window.now(d.metrics());
    let list: Vec<Value> = d
        .upstreams()
        .iter()
        .map(|u| upstream(d, c, &now, u, &tenants, transports.get(&*u.name).copied()))
        .collect();
    json!({"at": time(SystemTime::now()), "window_s": WINDOW_S, "upstreams": list})
}

fn upstream(
    d: &Dispatcher,
    c: &Console,
    now: &window::Now,
    u: &Arc<Upstream>,
    tenants: &[Arc<Tenant>],
    transport: Option<&'static str>,
) -> Value {
    let m = d.metrics();
    let standing = u.standing();
    let recent = c.window.recent(now, &u.name, standing.configured_at());
    let restarts = window::values_by(&m.upstream_restarts, "upstream", &u.name, "upstream");
    let catalog = u.catalog();
    let error_rate = match recent.calls {
        0 => 0.0,
        n => ((recent.errors as f64 / n as f64) * 10_000.0).round() / 10_000.0,
    };
    json!({
        "name": &*u.name,
        "protocol": u.dialect().as_str(),
        "transport": transport.unwrap_or("stdio"),
        "state": u.status().as_str(),
        "since": time(standing.since()),
        "required": u.required,
        "last_error": standing.last_error().map(|(at, message)| json!({"at": time(at), "message": message})),
        "restarts": restarts.first().map_or(0, |r| r.1 as u64),
        "in_flight": u.calls_in_flight(),
        "tools": catalog.listing(crate::protocol::Kind::Tool).count,
        "quarantined": catalog.quarantined_count(),
        "tenants": tenants.iter().filter(|t| t.sees(&u.name)).map(|t| &*t.name).collect::<Vec<_>>(),
        "recent": {
            "calls": recent.calls,
            "errors": recent.errors,
            "calls_per_s": rate(recent.calls, recent.seconds),
            "error_rate": error_rate,
            "p50_ms": recent.p50_ms,
            "p99_ms": recent.p99_ms,
        },
    })
}

/// How many of each reason the tenant's requests were refused for.
fn refusals(d: &Dispatcher, tenant: &str) -> serde_json::Map<String, Value> {
    let mut out: serde_json::Map<String, Value> =
        REFUSALS.iter().map(|r| (r.to_string(), json!(0))).collect();
    for (reason, n) in window::values_by(&d.metrics().requests_limited, "tenant", tenant, "reason")
    {
        out.insert(reason, json!(n as u64));
    }
    out
}

fn sessions(d: &Dispatcher, tenant: &str) -> u64 {
    let open = window::values_by(&d.metrics().sessions_open, "tenant", tenant, "tenant");
    open.first().map_or(0, |s| s.1.max(0.0) as u64)
}

pub fn tenants(d: &Dispatcher) -> Value {
    let m = d.metrics();
    let refused = window::sums_by(&m.requests_limited, "tenant");
    let open = window::sums_by(&m.sessions_open, "tenant");
    let list: Vec<Value> = d
        .tenants()
        .iter()
        .map(|t| {
            let mut counts = serde_json::Map::new();
            for (state, n) in super::tools::counts(d, t) {
                counts.insert(state.into(), json!(n));
            }
            json!({
                "name": &*t.name,
                "upstreams": t.upstreams.iter().map(|u| &**u).collect::<Vec<_>>(),
                "tools": counts,
                "in_flight": t.in_flight.load(Ordering::Relaxed),
                "sessions": open.get(&*t.name).map_or(0, |n| n.max(0.0) as u64),
                "refusals": refused.get(&*t.name).map_or(0, |n| *n as u64),
            })
        })
        .collect();
    json!({"at": time(SystemTime::now()), "tenants": list})
}

/// A tenant's figures: everything but its tools, and its tools (many,
/// so written straight from their types; see [`tenant_json`]).
pub fn tenant(d: &Dispatcher, c: &Console, name: &str) -> Option<(Value, Vec<ToolView>)> {
    let t = d.tenant_named(name)?;
    let m = d.metrics();
    let head = json!({
        "at": time(SystemTime::now()),
        "name": &*t.name,
        "upstreams": t.upstreams.iter().map(|u| &**u).collect::<Vec<_>>(),
        "limits": {
            "rate_limit": t.limits.rate.map(|(per_second, burst)| json!({"per_second": per_second, "burst": burst})),
            "max_concurrency": t.limits.concurrency,
            "max_sessions": t.max_sessions.unwrap_or(c.max_sessions_per_tenant),
            "max_connections": c.max_connections_per_tenant,
        },
        "usage": {
            "requests_per_s": (c.window.requests_per_s(m, &t.name) * 1000.0).round() / 1000.0,
            "rate_window_s": RATE_WINDOW_S,
            "in_flight": t.in_flight.load(Ordering::Relaxed),
            "sessions": sessions(d, &t.name),
            "connections": c.connections.held(&t.name),
        },
        "refusals": refusals(d, &t.name),
    });
    Some((head, super::tools::of(d, &t)))
}

/// The tenant's JSON: its head with `tools` added last.
pub fn tenant_json(head: &Value, tools: &[ToolView]) -> Vec<u8> {
    let mut out = serde_json::to_vec(head).unwrap_or_default();
    if out.pop() != Some(b'}') {
        return b"{}".to_vec();
    }
    out.extend_from_slice(br#","tools":"#);
    if serde_json::to_writer(&mut out, tools).is_err() {
        return b"{}".to_vec();
    }
    out.push(b'}');
    out
}

pub fn config(d: &Dispatcher, c: &Console) -> Value {
    let r = c.record.now();
    let reloads = |outcome: &str| {
        window::values_by(&d.metrics().config_reloads, "outcome", outcome, "outcome")
            .first()
            .map_or(0, |v| v.1 as u64)
    };
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "gateway_id": d.gateway_id(),
        "started_at": time(c.started_at),
        "digest": r.digest,
        "loaded_at": time(r.loaded_at),
        "reloads": {"applied": reloads("applied"), "rejected": reloads("rejected")},
        "last_reload": r.last_reload.map(|l| json!({
            "at": time(l.at),
            "outcome": if l.applied { "applied" } else { "rejected" },
            "digest": l.digest,
            "error": l.error,
        })),
    })
}
