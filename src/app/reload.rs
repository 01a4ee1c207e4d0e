//! Reloading the configuration from its file: on SIGHUP, and when the
//! file or a key file it reads changes (content digests, polled).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use std::path::PathBuf;

use crate::config::Config;

use super::*;

/// A digest of the contents of `files` (a missing file counts as empty).
fn digest(files: &[PathBuf]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for f in files {
        h.update(f.as_os_str().as_encoded_bytes());
        h.update(std::fs::read(f).unwrap_or_default());
    }
    h.finalize().to_vec()
}

/// Reloads the configuration from `path` on SIGHUP, and when the config file
/// or a key file it reads changes (polled: content digests, so the symlink
/// swap Kubernetes does when a ConfigMap or Secret changes is seen as well).
/// An invalid config is rejected with a log line and a metric, and the
/// running one keeps serving.
pub(super) async fn watch_config(
    core: Arc<Core>,
    path: PathBuf,
    mut sources: Vec<PathBuf>,
    poll: Option<Duration>,
    stop: CancellationToken,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = signal(SignalKind::hangup()).ok();
    let mut seen = digest(&sources);
    for outcome in ["applied", "rejected"] {
        core.metrics.config_reloads.with_label_values(&[outcome]);
    }
    loop {
        let forced = tokio::select! {
            _ = async { match hangup.as_mut() { Some(h) => { h.recv().await; } None => std::future::pending().await } } => true,
            _ = async { match poll { Some(p) => tokio::time::sleep(p).await, None => std::future::pending().await } } => false,
            _ = stop.cancelled() => return,
        };
        let now = digest(&sources);
        if !forced && now == seen {
            continue;
        }
        seen = now;
        let result = match Config::load_tracing(&path, crate::config::Purpose::Serve) {
            Ok(c) => core.reload(&c).inspect(|_| {
                sources = c.sources.clone();
                seen = digest(&sources);
            }),
            // Watched from now on too: what the rejected config names (a
            // key file not there yet) is looked at again when it appears.
            Err((e, tried)) => {
                for file in tried {
                    if !sources.contains(&file) {
                        sources.push(file);
                    }
                }
                seen = digest(&sources);
                Err(e.to_string())
            }
        };
        let file_digest = crate::config::text_digest(&std::fs::read(&path).unwrap_or_default());
        match &result {
            Ok(_) => core.console.record.applied(file_digest),
            Err(e) => core.console.record.rejected(file_digest, e.clone()),
        }
        match result {
            Ok(summary) => {
                tracing::info!(config = %path.display(), %summary, "configuration reloaded");
                core.metrics
                    .config_reloads
                    .with_label_values(&["applied"])
                    .inc();
            }
            Err(e) => {
                tracing::error!(config = %path.display(), error = %e, "configuration reload rejected; the running configuration stays");
                core.metrics
                    .config_reloads
                    .with_label_values(&["rejected"])
                    .inc();
            }
        }
    }
}
