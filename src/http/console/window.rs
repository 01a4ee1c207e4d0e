//! Recent figures for the console, from the metrics the gateway keeps
//! anyway: a task reads the counters every second and keeps samples (every
//! 5 s of the last 300 s for upstreams' tool calls, every second of the
//! last 10 s for tenants' requests). A poll differences the newest sample
//! and the one a window ago: no call pays for it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// The upstreams' window, in seconds.
pub const WINDOW_S: u64 = 300;
/// The tenants' request rate's window, in seconds.
pub const RATE_WINDOW_S: u64 = 10;
/// Upstreams are sampled every this many ticks (seconds).
const UPSTREAM_EVERY: u64 = 5;

/// An upstream's tool calls so far: how many, how many failed, and the
/// duration histogram's cumulative bucket counts (upper bound in seconds).
#[derive(Clone, Default, Debug)]
pub struct Calls {
    pub calls: u64,
    pub errors: u64,
    pub buckets: Vec<(f64, u64)>,
}

struct Sample<T> {
    at: SystemTime,
    values: HashMap<String, T>,
}

#[derive(Default)]
struct Kept {
    upstreams: VecDeque<Sample<Calls>>,
    tenants: VecDeque<Sample<u64>>,
}

/// The samples; a cheap clone.
#[derive(Clone, Default)]
pub struct Window(Arc<Mutex<Kept>>);

/// Every upstream's tool calls so far, read once.
pub struct Now {
    at: SystemTime,
    calls: HashMap<String, Calls>,
}

/// An upstream's tool calls within the window.
pub struct Recent {
    pub calls: u64,
    pub errors: u64,
    pub seconds: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

impl Window {
    /// Samples `metrics` every second until `stop`.
    pub fn spawn(&self, metrics: Metrics, stop: CancellationToken) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut n: u64 = 0;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = stop.cancelled() => return,
                }
                this.sample(&metrics, n % UPSTREAM_EVERY == 0);
                n += 1;
            }
        });
    }

    fn sample(&self, metrics: &Metrics, upstreams: bool) {
        let at = SystemTime::now();
        let tenants = Sample {
            at,
            values: requests(metrics),
        };
        let ups = upstreams.then(|| Sample {
            at,
            values: calls(metrics),
        });
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        push(&mut kept.tenants, tenants, RATE_WINDOW_S);
        if let Some(ups) = ups {
            push(&mut kept.upstreams, ups, WINDOW_S);
        }
    }

    /// The upstream's tool calls of the last [`WINDOW_S`] seconds, or
    /// since `configured_at` when that is later.
    /// `now` is [`Self::now`]'s reading, made once for every upstream asked.
    pub fn recent(&self, now: &Now, upstream: &str, configured_at: SystemTime) -> Recent {
        let current = now.calls.get(upstream).cloned().unwrap_or_default();
        let now = now.at;
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let window_start = now - Duration::from_secs(WINDOW_S);
        // The oldest sample within the window taken after the upstream was
        // configured (an upstream a sample lacks had counted nothing yet);
        // none yet: from its configuration on.
        let from = configured_at.max(window_start);
        let base = kept.upstreams.iter().find(|s| s.at >= from).map(|s| {
            let counted = s.values.get(upstream).cloned().unwrap_or_default();
            (s.at, counted)
        });
        drop(kept);
        let (from, base) = base.unwrap_or((from, Calls::default()));
        let seconds = now
            .duration_since(from)
            .unwrap_or_default()
            .as_secs_f64()
            .max(1.0);
        let calls = current.calls.saturating_sub(base.calls);
        let errors = current.errors.saturating_sub(base.errors);
        let buckets: Vec<(f64, u64)> = current
            .buckets
            .iter()
            .map(|&(le, n)| {
                let was = base.buckets.iter().find(|b| b.0 == le).map_or(0, |b| b.1);
                (le, n.saturating_sub(was))
            })
            .collect();
        Recent {
            calls,
            errors,
            seconds,
            p50_ms: quantile(&buckets, 0.5),
            p99_ms: quantile(&buckets, 0.99),
        }
    }

    /// The counters as they are now, for [`Self::recent`].
    pub fn now(&self, metrics: &Metrics) -> Now {
        Now {
            at: SystemTime::now(),
            calls: calls(metrics),
        }
    }

    /// The tenant's requests per second over the last [`RATE_WINDOW_S`] seconds.
    pub fn requests_per_s(&self, metrics: &Metrics, tenant: &str) -> f64 {
        let now = SystemTime::now();
        let current = requests(metrics).get(tenant).copied().unwrap_or(0);
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(oldest) = kept.tenants.front() else {
            return 0.0;
        };
        let was = oldest.values.get(tenant).copied().unwrap_or(0);
        // A window younger than a second counts as one.
        let seconds = now
            .duration_since(oldest.at)
            .unwrap_or_default()
            .as_secs_f64()
            .max(1.0);
        current.saturating_sub(was) as f64 / seconds
    }
}

fn push<T>(kept: &mut VecDeque<Sample<T>>, sample: Sample<T>, window_s: u64) {
    let keep_from = sample.at - Duration::from_secs(window_s + UPSTREAM_EVERY);
    kept.push_back(sample);
    while kept.front().is_some_and(|s| s.at < keep_from) {
        kept.pop_front();
    }
}

/// The upper bound, in milliseconds, of the bucket the `q` quantile falls
/// in (the last finite bound for the +Inf bucket); none without calls.
fn quantile(cumulative: &[(f64, u64)], q: f64) -> Option<f64> {
    let total = cumulative.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = (q * total as f64).ceil() as u64;
    let finite = cumulative
        .iter()
        .rev()
        .find(|b| b.0.is_finite())
        .map(|b| b.0);
    let le = cumulative
        .iter()
        .find(|b| b.1 >= rank)
        .map(|b| b.0)
        .filter(|le| le.is_finite())
        .or(finite)?;
    Some((le * 1000.0 * 1000.0).round() / 1000.0)
}

/// The label `name` of a sample.
fn label<'a>(m: &'a prometheus::proto::Metric, name: &str) -> &'a str {
    m.get_label()
        .iter()
        .find(|l| l.name() == name)
        .map_or("", |l| l.value())
}

/// Whether `method` calls a tool (either protocol's name for it).
fn calls_a_tool(method: &str) -> bool {
    method == "tools/call" || method == "mcp/executeTool"
}

/// Every upstream's tool calls so far.
fn calls(metrics: &Metrics) -> HashMap<String, Calls> {
    use prometheus::core::Collector;
    let mut out: HashMap<String, Calls> = HashMap::new();
    for family in metrics.upstream_calls.collect() {
        for m in family.get_metric() {
            if !calls_a_tool(label(m, "method")) {
                continue;
            }
            let n = m.get_counter().get_value() as u64;
            let entry = out.entry(label(m, "upstream").to_owned()).or_default();
            entry.calls += n;
            if label(m, "outcome") != "ok" {
                entry.errors += n;
            }
        }
    }
    for family in metrics.upstream_seconds.collect() {
        for m in family.get_metric() {
            if !calls_a_tool(label(m, "method")) {
                continue;
            }
            let entry = out.entry(label(m, "upstream").to_owned()).or_default();
            let h = m.get_histogram();
            let mut buckets: Vec<(f64, u64)> = h
                .get_bucket()
                .iter()
                .map(|b| (b.upper_bound(), b.cumulative_count()))
                .collect();
            buckets.push((f64::INFINITY, h.get_sample_count()));
            // Both methods' histograms together (an upstream speaks one).
            if entry.buckets.is_empty() {
                entry.buckets = buckets;
            } else {
                for (kept, (_, n)) in entry.buckets.iter_mut().zip(buckets) {
                    kept.1 += n;
                }
            }
        }
    }
    out
}

/// Every tenant's requests so far.
fn requests(metrics: &Metrics) -> HashMap<String, u64> {
    use prometheus::core::Collector;
    let mut out: HashMap<String, u64> = HashMap::new();
    for family in metrics.requests.collect() {
        for m in family.get_metric() {
            *out.entry(label(m, "tenant").to_owned()).or_default() +=
                m.get_counter().get_value() as u64;
        }
    }
    out
}

/// The value of each series of `vec` whose label `key` is `value`, by its
/// label `by` (a counter's or a gauge's), without making the series.
pub fn values_by(
    vec: &impl prometheus::core::Collector,
    key: &str,
    value: &str,
    by: &str,
) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for family in vec.collect() {
        for m in family.get_metric() {
            if label(m, key) != value {
                continue;
            }
            // A series is a counter or a gauge; the other reads 0.
            let v = m.get_counter().get_value() + m.get_gauge().get_value();
            out.push((label(m, by).to_owned(), v));
        }
    }
    out
}

/// The sum of `vec`'s series by their label `by` (a counter's or a gauge's).
pub fn sums_by(vec: &impl prometheus::core::Collector, by: &str) -> HashMap<String, f64> {
    let mut out: HashMap<String, f64> = HashMap::new();
    for family in vec.collect() {
        for m in family.get_metric() {
            *out.entry(label(m, by).to_owned()).or_default() +=
                m.get_counter().get_value() + m.get_gauge().get_value();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quantile_is_the_bound_of_its_bucket() {
        let b = [
            (0.005, 0),
            (0.01, 50),
            (0.1, 99),
            (1.0, 100),
            (f64::INFINITY, 100),
        ];
        assert_eq!(quantile(&b, 0.5), Some(10.0));
        assert_eq!(quantile(&b, 0.99), Some(100.0));
        assert_eq!(quantile(&[(0.1, 0), (f64::INFINITY, 0)], 0.5), None);
        assert_eq!(quantile(&[(0.1, 0), (f64::INFINITY, 3)], 0.5), Some(100.0));
    }
}
