//! What a tenant's agents see of its tools (`tools.hide`, `tools.bare_names`,
//! `tools.overrides`, `tools.output`), compiled from the file. The tools keep their true
//! identity (the namespaced id) for everything the gateway decides: policy,
//! scopes, limits, pins, metrics and the audit line all read the id.

use std::collections::HashMap;
use std::time::Duration;

/// Bytes a token is counted as, for `max_tokens`.
pub const BYTES_PER_TOKEN: u64 = 4;

/// One tenant's curation; `None` in a `TenantSpec` when it asks for none,
/// so that an uncurated tenant's paths stay as they are.
#[derive(Debug, Clone, Default)]
pub struct Curation {
    /// Tools out of the tenant's listings, called as if they did not exist.
    pub hide: Option<globset::GlobSet>,
    /// The `hide` patterns as written, in the set's order.
    pub hide_globs: Vec<String>,
    /// The Model Context Protocol face lists a tool under its own name where
    /// no other visible tool of the tenant has that name.
    pub bare_names: bool,
    /// By exact namespaced id.
    pub overrides: HashMap<String, Override, foldhash::fast::RandomState>,
    /// The result budget of every tool of the tenant (`tools.output`).
    pub output: Option<OutputSettings>,
    /// The tenant's result cache (`tools.cache`).
    pub cache: Option<CacheSettings>,
    /// Progressive discovery (`tools.discovery`).
    pub discovery: Option<Discovery>,
    /// A digest of the settings as written: equal for equal settings, so a
    /// reload that changes them tells the tenant's sessions its listing changed.
    pub digest: u64,
}

/// The meta-tools' names (`tools.discovery`), which no tool of a tenant
/// whose discovery searches is listed under.
pub const META_TOOLS: [&str; 3] = ["search_tools", "call_tool", "load_tools"];

/// How a tenant's tools are listed (`tools.discovery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DiscoveryMode {
    /// Every visible tool (as without discovery).
    Direct,
    /// The meta-tools, the `always` tools and a session's loaded ones.
    Search,
    /// Search when the caller sees more than `threshold` tools.
    Auto { threshold: usize },
}

/// A tenant's progressive discovery, compiled.
#[derive(Debug, Clone)]
pub struct Discovery {
    pub mode: DiscoveryMode,
    /// Tools still listed in search mode.
    pub always: Option<globset::GlobSet>,
    pub limit: usize,
    pub max_limit: usize,
    pub max_loaded: usize,
}

impl Discovery {
    /// Whether the meta-tools exist (they answer in search and auto).
    pub fn searches(&self) -> bool {
        self.mode != DiscoveryMode::Direct
    }

    /// Whether a caller that sees `visible` tools gets a search listing.
    pub fn lists_search(&self, visible: usize) -> bool {
        match self.mode {
            DiscoveryMode::Direct => false,
            DiscoveryMode::Search => true,
            DiscoveryMode::Auto { threshold } => visible > threshold,
        }
    }
}

/// What the tenant's agents see of one tool in place of the upstream's.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Override {
    /// Its name in both faces.
    pub name: Option<String>,
    /// Its title in the Model Context Protocol face.
    pub title: Option<String>,
    /// Its description in both faces.
    pub description: Option<String>,
    /// Its result budget's keys, each replacing the tenant's.
    pub output: Option<OutputSettings>,
    /// Whether its results are cached, whatever hints say.
    pub cache: Option<CacheChoice>,
}

/// A tenant's result cache as written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CacheSettings {
    pub ttl_ms: Option<u64>,
    pub max_entries: Option<u64>,
    pub hints: bool,
}

impl CacheSettings {
    /// Results kept for the tenant at most.
    pub fn max_entries(&self) -> usize {
        self.max_entries
            .map_or(1024, |n| usize::try_from(n).unwrap_or(usize::MAX))
    }
}

/// One tool's caching, by its override.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CacheChoice {
    Off,
    On,
    For(u64),
}

/// A result budget's keys as written; a key left out falls back to the
/// tenant's, then to its default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OutputSettings {
    pub max_bytes: Option<u64>,
    pub max_tokens: Option<u64>,
    pub page_bytes: Option<u64>,
    pub spill_ttl_ms: Option<u64>,
    pub spill_quota_bytes: Option<u64>,
}

impl OutputSettings {
    /// These keys, those left out taken from `base`.
    fn over(self, base: Option<&OutputSettings>) -> OutputSettings {
        let Some(b) = base else { return self };
        OutputSettings {
            max_bytes: self.max_bytes.or(b.max_bytes),
            max_tokens: self.max_tokens.or(b.max_tokens),
            page_bytes: self.page_bytes.or(b.page_bytes),
            spill_ttl_ms: self.spill_ttl_ms.or(b.spill_ttl_ms),
            spill_quota_bytes: self.spill_quota_bytes.or(b.spill_quota_bytes),
        }
    }

    /// The budget these keys set: none unless `max_bytes` or `max_tokens` is set.
    fn budget(&self) -> Option<Budget> {
        let tokens = self.max_tokens.map(|t| t.saturating_mul(BYTES_PER_TOKEN));
        let max = match (self.max_bytes, tokens) {
            (Some(b), Some(t)) => b.min(t),
            (b, t) => b.or(t)?,
        };
        let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        Some(Budget {
            max_bytes: size(max),
            page_bytes: size(self.page_bytes.unwrap_or(65_536)),
            spill_ttl: Duration::from_millis(self.spill_ttl_ms.unwrap_or(600_000)),
            spill_quota: self.spill_quota_bytes.unwrap_or(64 << 20),
        })
    }
}

/// One tool's result budget, settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The most bytes of a result sent whole (the smaller of `max_bytes`
    /// and `max_tokens` counted in bytes).
    pub max_bytes: usize,
    /// The most bytes of one spill page.
    pub page_bytes: usize,
    /// How long the pages can be read.
    pub spill_ttl: Duration,
    /// The most bytes of pages the tenant keeps.
    pub spill_quota: u64,
}

impl Curation {
    /// Whether the tool with this namespaced id is hidden from the tenant.
    pub fn hides(&self, id: &str) -> bool {
        self.hide.as_ref().is_some_and(|h| h.is_match(id))
    }

    /// What the tenant sees of this tool in place of the upstream's, if anything.
    pub fn over(&self, id: &str) -> Option<&Override> {
        self.overrides.get(id)
    }

    /// The tool's result budget, if it has one.
    pub fn budget(&self, id: &str) -> Option<Budget> {
        let own = self.over(id).and_then(|o| o.output);
        match own {
            Some(own) => own.over(self.output.as_ref()).budget(),
            None => self.output.as_ref()?.budget(),
        }
    }

    /// How long the tool's results are kept, if they are: an override's
    /// `cache` decides (false wins over hints), else the tenant's hints
    /// with `hinted`, whether the upstream marks it read-only and idempotent.
    pub fn cache_ttl(&self, id: &str, hinted: impl FnOnce() -> bool) -> Option<Duration> {
        let ttl = |ms: Option<u64>| Duration::from_millis(ms.unwrap_or(60_000));
        let tenant = self.cache.as_ref();
        match self.over(id).and_then(|o| o.cache) {
            Some(CacheChoice::Off) => None,
            Some(CacheChoice::On) => Some(ttl(tenant.and_then(|c| c.ttl_ms))),
            Some(CacheChoice::For(ms)) => Some(ttl(Some(ms))),
            None => {
                let c = tenant.filter(|c| c.hints)?;
                hinted().then(|| ttl(c.ttl_ms))
            }
        }
    }

    /// Whether the tool's listing entry differs from the upstream's in the
    /// MCP v1.0 face (its name or description, or an outputSchema that
    /// admits the stub of a cut result).
    pub fn renders_v1(&self, id: &str) -> bool {
        self.over(id)
            .is_some_and(|o| o.name.is_some() || o.description.is_some())
            || self.budget(id).is_some()
    }
}
