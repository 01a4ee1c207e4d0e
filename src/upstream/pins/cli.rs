//! `mcp-gateway pins`: the review offline. `list` prints what `GET /pins`
//! answers; `approve` and `reject` decide, in the pins file or in the shared
//! store (whose replicas relist the upstream at once; a gateway reading the
//! file applies a decision at its next refresh of the upstream). Each
//! decision is audited on stderr as the admin listener audits its own.

use std::path::Path;
use std::process::ExitCode;

use super::review::{self, Review};
use super::{PinStore, State, Undecided};
use crate::config::Config;

/// What the command was asked.
pub enum Action<'a> {
    List,
    /// Of one tool (and that definition, when given), or of every definition
    /// pending (not rejected) of the upstreams named.
    Decide {
        approve: bool,
        upstream: Option<&'a str>,
        tool: Option<&'a str>,
        fingerprint: Option<&'a str>,
    },
}

pub fn run(config: &Path, action: Action<'_>) -> ExitCode {
    let loaded = match Config::load(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: {e}", config.display());
            return ExitCode::FAILURE;
        }
    };
    let Some(path) = loaded.gateway.pins_file.clone() else {
        eprintln!(
            "{}: no gateway.pins_file: nothing is pinned",
            config.display()
        );
        return ExitCode::FAILURE;
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        eprintln!("cannot start a runtime");
        return ExitCode::FAILURE;
    };
    rt.block_on(async {
        let mut pins = PinStore::new(path);
        if let Some(settings) = loaded.gateway.store.clone() {
            let url = settings.url.clone();
            let store = crate::store::Store::new(settings, crate::metrics::Metrics::new());
            let store = match store {
                Ok(store) => store,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
            };
            if let Err(e) = store.open().await {
                eprintln!("cannot reach the store at {url}: {e}");
                return ExitCode::FAILURE;
            }
            pins = pins.shared(store);
        }
        let pinned: Vec<&str> = loaded
            .upstreams
            .iter()
            .filter(|u| u.pin)
            .map(|u| u.name.as_str())
            .collect();
        let done = match action {
            Action::List => list(&pins, &loaded.gateway.id, &pinned).await,
            Action::Decide {
                approve,
                upstream,
                tool,
                fingerprint,
            } => {
                if let Some(up) = upstream.filter(|u| !pinned.contains(u)) {
                    Err(format!(
                        "{up} is no pinned upstream of {}",
                        config.display()
                    ))
                } else {
                    let ups: Vec<&str> = match upstream {
                        Some(up) => vec![up],
                        None => pinned,
                    };
                    decide(&pins, &ups, tool, fingerprint, approve).await
                }
            }
        };
        match done {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        }
    })
}

async fn list(pins: &PinStore, gateway: &str, upstreams: &[&str]) -> Result<(), String> {
    let mut doc = Review::default();
    for up in upstreams {
        let record = pins
            .record(up)
            .await
            .map_err(|e| format!("{}: {e}", pins.place()))?;
        review::add(&mut doc, gateway, up, &record);
    }
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    println!("{text}");
    Ok(())
}

async fn decide(
    pins: &PinStore,
    upstreams: &[&str],
    tool: Option<&str>,
    fingerprint: Option<&str>,
    approve: bool,
) -> Result<(), String> {
    let verb = if approve { "approved" } else { "rejected" };
    let mut count = 0;
    for up in upstreams {
        // One tool as asked, or every definition still pending.
        let tools: Vec<(String, Option<String>)> = match tool {
            Some(tool) => vec![(tool.to_owned(), fingerprint.map(str::to_owned))],
            None => pins
                .record(up)
                .await
                .map_err(|e| format!("{}: {e}", pins.place()))?
                .into_iter()
                .filter_map(|(id, pin)| {
                    let pending = pin.pending.filter(|p| p.state == State::Pending)?;
                    Some((id, Some(pending.fingerprint)))
                })
                .collect(),
        };
        let mut decided = false;
        for (id, print) in tools {
            let outcome = pins
                .decide(up, &id, print.as_deref(), approve)
                .await
                .map_err(|e| format!("{}: {e}", pins.place()))?;
            match outcome {
                Ok(print) => {
                    audit(up, &id, verb, &print);
                    println!("{verb} {up} {id}");
                    decided = true;
                    count += 1;
                }
                Err(Undecided::Nothing) if tool.is_some() && upstreams.len() == 1 => {
                    return Err(format!("nothing of {up}'s {id} waits for review"));
                }
                Err(Undecided::Nothing) => {}
                Err(Undecided::Other(waiting)) => {
                    return Err(format!(
                        "{up}'s {id} waits with another definition than the one reviewed: {waiting}"
                    ));
                }
            }
        }
        if decided && let Some(store) = pins.store() {
            store
                .announce_relisting(up)
                .await
                .map_err(|e| format!("{verb}, but the replicas were not told: {e}"))?;
        }
    }
    match pins.store() {
        Some(store) => println!(
            "{count} {verb} in the store at {}; every replica applies it now",
            store.settings().url
        ),
        None => println!(
            "{count} {verb} in {}; the gateway applies it at its next refresh of the upstream",
            pins.path().display()
        ),
    }
    Ok(())
}

/// The decision's audit line, as the gateway's log writes one, on stderr.
fn audit(upstream: &str, tool: &str, decision: &str, fingerprint: &str) {
    let line = serde_json::json!({
        "timestamp": humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
        "level": "INFO",
        "message": "pin decision",
        "upstream": upstream,
        "tool": tool,
        "decision": decision,
        "fingerprint": fingerprint,
        "via": "cli",
        "target": crate::telemetry::AUDIT,
    });
    eprintln!("{line}");
}
