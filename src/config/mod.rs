//! Configuration: YAML (`raw`) → checked, with every problem reported at once
//! and where it is (`validate`) → frozen typed values (this file).

pub mod admin_ui;
pub mod consent;
pub mod curation;
pub mod raw;
pub mod raw_consent;
pub mod restart;
mod shape;
pub mod signing;
mod tool_globs;
pub mod upstream_auth;
mod validate;

pub use tool_globs::ToolGlobs;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use validate::{KeyDigest, Problem};

/// The bounds of `gateway.tool_name_budget`, shared by its check and by
/// the names the Model Context Protocol face gives (`modelcontext::names`).
pub mod tool_names {
    /// The longest name the protocol's tool-name rule allows.
    pub const MAX_NAME: usize = 64;
    /// The default budget: room for a host's own prefix of up to 16 characters.
    pub const DEFAULT_BUDGET: usize = 48;
    /// The shortest budget that still leaves a readable part beside the hash.
    pub const MIN_BUDGET: usize = 20;

    /// Whether `b` may stand in a tool name: letters, digits, `-` and `_`.
    pub fn allowed(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
    }

    /// Whether `name` is a valid tool name of the Model Context Protocol
    /// (which `check` holds configured names to as well).
    pub fn is_valid(name: &str) -> bool {
        (1..=MAX_NAME).contains(&name.len()) && name.bytes().all(allowed)
    }
}

/// The gateway's own settings.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    /// Authority of namespaced mcpIds.
    pub id: String,
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    /// How long in-flight requests may run after a shutdown signal.
    pub shutdown_timeout: Duration,
    /// How long a request of an upstream's, forwarded to the client whose
    /// call it relates to, waits for that client's answer (default 300 s);
    /// past it the upstream is answered with an error. Read at start.
    pub server_request_timeout: Duration,
    /// Where pinned tool fingerprints are kept (relative: to the config file's directory).
    pub pins_file: Option<PathBuf>,
    /// How often the config file (and the key files it reads) are checked for
    /// changes; `None`: only on SIGHUP. Default 2 s.
    pub reload_poll: Option<Duration>,
    pub limits: Limits,
    /// When set, `/metrics` and `/readyz`'s detail need it as a bearer token
    /// (probes keep `/healthz` and `/readyz`'s status). Applied on reload.
    pub admin_token: Option<KeyDigest>,
    /// `gateway.upstream_auth.max_cached_tokens`: obtained tokens kept at
    /// most, every upstream's together. Applied on reload.
    pub max_cached_tokens: usize,
    /// What every upstream's `user_consent` shares; `None` when
    /// `gateway.upstream_auth` gives no public_url and encryption_keys.
    pub consent: Option<consent::ConsentSettings>,
    /// `gateway.admin_ui`: the console under `/ui`. Applied on reload.
    pub admin_ui: admin_ui::AdminUi,
    /// Origins (`scheme://host[:port]`) whose requests are served; a request
    /// with any other `Origin` header gets 403. Empty by default. Read at start.
    pub allowed_origins: Vec<String>,
    /// When set, handshake-era clients of the Model Context Protocol get an
    /// `Mcp-Session-Id` sealed with this key (the SHA-256 of the configured
    /// secret), which every replica with the same secret accepts. Read at start.
    pub session_key: Option<KeyDigest>,
    /// The length the Model Context Protocol face's tool and prompt names keep
    /// within (20 to 64; default 48, room for a host's prefix). Read at start.
    pub tool_name_budget: usize,
    /// The store replicas share limits and state through (`gateway.store`);
    /// `None`: each replica keeps its own. Read at start.
    pub store: Option<StoreSettings>,
    /// What the command line (or the process's limits) set in place of the
    /// file: a reload leaves it, and does not call it a change.
    pub fixed: Fixed,
}

/// Settings the command line or the process fixed at start (see
/// [`GatewaySettings::fixed`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fixed {
    /// `--listen` was given.
    pub listen: bool,
    /// `--admin-listen` was given.
    pub admin_listen: bool,
    /// The connection caps were lowered to what the descriptor limit leaves
    /// room for: this many at most.
    pub connections: Option<usize>,
}

/// `gateway.store`: a server of the Redis protocol (Redis 6+, Valkey).
#[derive(Clone, PartialEq, Eq)]
pub struct StoreSettings {
    /// `redis://` or `rediss://`, without credentials (they are below).
    pub url: String,
    pub username: Option<String>,
    pub password: Option<String>,
    /// Every key the gateway writes starts with it (default `mcp-gateway:`).
    pub key_prefix: String,
    pub when_down: WhenDown,
    /// The longest any call waits on the store (1 ms to 10 s; default 50 ms).
    pub timeout: Duration,
}

impl std::fmt::Debug for StoreSettings {
    // Never the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreSettings")
            .field("url", &self.url)
            .field("key_prefix", &self.key_prefix)
            .field("when_down", &self.when_down)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// What the limits do while the store cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenDown {
    /// Each replica enforces its share of every limit (the default).
    Local,
    /// Calls of tenants with a rate or concurrency limit are refused (503).
    Refuse,
}

impl WhenDown {
    pub fn as_str(self) -> &'static str {
        match self {
            WhenDown::Local => "local",
            WhenDown::Refuse => "refuse",
        }
    }
}

/// Every limit, named, with its default.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest agent request body (413 past it). Default 4 MiB.
    pub max_body_bytes: usize,
    /// Largest message to or from an upstream. Default 16 MiB.
    pub max_frame_bytes: usize,
    /// Most messages in one JSON-RPC batch. Default 128.
    pub max_batch: usize,
    /// Time a client has to send its request headers; also how long an idle
    /// keep-alive connection is kept. Default 10 s.
    pub header_read_timeout: Duration,
    /// Time a client has to send a whole request body (not a session's: that may
    /// stay open). 408 past it. Default 30 s.
    pub body_read_timeout: Duration,
    /// Most agent connections open at once. Default 4096.
    pub max_connections: usize,
    /// Sessions one tenant may have open at once (a tenant's `max_sessions`
    /// overrides it); past it a new session gets 429. Default 256, so that
    /// one tenant cannot hold every connection.
    pub max_sessions_per_tenant: usize,
    /// Agent connections one tenant may hold (a connection is its latest
    /// request's tenant's); past it, 429 and the connection is closed.
    /// Default: a quarter of `max_connections`.
    pub max_connections_per_tenant: usize,
    /// A session whose client has sent nothing for this long, with no call
    /// in flight, is ended. Default 5 min.
    pub session_idle_timeout: Duration,
    /// Calls in flight in one session; past it a call gets -32004. Default 64.
    pub max_session_in_flight: usize,
    /// Handshake-era sessions of one tenant that a replica keeps a record of
    /// (ended by DELETE, or holding subscriptions), each until its id
    /// expires; past it a DELETE gets 429 and a subscription -32004. Per
    /// tenant, so one tenant filling its own cannot touch another's. Default 16384.
    pub max_session_records_per_tenant: usize,
    /// Bytes of resource uris one session, or one `subscriptions/listen`
    /// (its id included), may hold subscribed. Default 64 KiB.
    pub max_subscription_bytes_per_session: usize,
    /// Bytes of resource uris one tenant's sessions and listens may hold
    /// subscribed together. Default 1 MiB.
    pub max_subscription_bytes_per_tenant: usize,
    /// Bytes one upstream's listing of one kind may take, all its pages
    /// together; past it the rest is left out (counted, logged). Default 8 MiB.
    pub max_listing_bytes: usize,
    /// Bytes one definition (a tool, resource, prompt or template) may take;
    /// a larger one is left out (counted, logged). Default 256 KiB.
    pub max_definition_bytes: usize,
    /// Requests from one upstream (a `ping`, ...) being answered at once;
    /// past it a request is dropped unanswered and counted. Default 16.
    pub max_server_requests: usize,
    /// Bytes of spilled result pages kept on this replica. Default 256 MiB.
    pub max_spill_bytes: usize,
    /// Bytes of cached results kept on this replica. Default 64 MiB.
    pub max_cache_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 << 20,
            max_frame_bytes: 16 << 20,
            max_batch: 128,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_connections: 4096,
            max_sessions_per_tenant: 256,
            max_connections_per_tenant: 1024,
            session_idle_timeout: Duration::from_secs(300),
            max_session_in_flight: 64,
            max_session_records_per_tenant: 16_384,
            max_subscription_bytes_per_session: 64 << 10,
            max_subscription_bytes_per_tenant: 1 << 20,
            max_listing_bytes: 8 << 20,
            max_definition_bytes: 256 << 10,
            max_server_requests: 16,
            max_spill_bytes: 256 << 20,
            max_cache_bytes: 64 << 20,
        }
    }
}

/// How to reach one upstream.
#[derive(Debug, Clone, PartialEq)]
pub enum TransportSpec {
    Stdio(StdioSpec),
    Http(HttpSpec),
}

#[derive(Debug, Clone, PartialEq)]
pub struct StdioSpec {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HttpSpec {
    pub url: String,
    pub headers: BTreeMap<String, String>,
    /// Hold a long-lived session to the upstream to hear its notifications.
    pub notifications: bool,
}

/// The protocol an upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// Told at the first handshake (`protocol: auto`, the default): see
    /// `upstream::detect`.
    #[default]
    Auto,
    /// MCP v1.0 (`protocol: v1`).
    V1,
    /// The Model Context Protocol of modelcontextprotocol.io
    /// (`protocol: modelcontextprotocol`).
    ModelContext,
}

impl Protocol {
    /// The config value, also a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Auto => "auto",
            Protocol::V1 => "v1",
            Protocol::ModelContext => "modelcontextprotocol",
        }
    }
}

/// One configured upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamSpec {
    pub name: String,
    pub transport: TransportSpec,
    pub protocol: Protocol,
    /// Calls past it fail with -32003. Default 30 s.
    pub timeout: Duration,
    /// Readiness waits for this upstream (default false: optional upstreams never fail readiness).
    pub required: bool,
    /// Calls in flight at once, and calls waiting for a slot; past both, -32004 at once.
    pub max_concurrency: Option<usize>,
    pub max_queue: usize,
    /// Pin its tool definitions (rug-pull defence); needs `gateway.pins_file`.
    pub pin: bool,
    /// A stdio child of the Model Context Protocol run once per client
    /// session (`per_session: true`), so its requests belong to that client.
    pub per_session: bool,
    /// Every tenant served by the same process or upstream session
    /// (`shared: true`), for servers known to keep no state between calls.
    /// Without it each tenant that lists the upstream gets its own.
    pub shared: bool,
    /// Bounds on the children (or HTTP sessions) run for one tenant or one
    /// client session.
    pub children: ChildBounds,
    /// A credential the gateway obtains for it, sent with every request.
    pub auth: Option<upstream_auth::UpstreamAuth>,
}

/// What one tenant's children of an upstream may take: at most
/// `max_children` at once (default 16; `per_session` upstreams may run
/// more than one), each ended once idle for `idle_timeout` (default 300 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildBounds {
    pub max_children: usize,
    pub idle_timeout: Duration,
}

impl Default for ChildBounds {
    fn default() -> Self {
        ChildBounds {
            max_children: 16,
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// One tenant: who it is, how it authenticates, which upstreams it sees (in listing order).
#[derive(Debug, Clone)]
pub struct TenantSpec {
    pub name: String,
    pub keys: Vec<KeyDigest>,
    pub upstreams: Vec<String>,
    /// Glob patterns on namespaced tool ids, compiled: with any `allow`, only
    /// matching tools; never one that matches a `deny`.
    pub tools: ToolGlobs,
    /// Requests per second and burst; past it, HTTP 429 with Retry-After (-32004 in sessions).
    pub rate_limit: Option<(u32, u32)>,
    /// Requests in flight at once; past it, the same.
    pub max_concurrency: Option<usize>,
    /// Sessions open at once; `None`: `gateway.limits.max_sessions_per_tenant`.
    pub max_sessions: Option<usize>,
    /// What its agents see of its tools; `None`: the upstreams' own.
    pub curation: Option<std::sync::Arc<curation::Curation>>,
    /// A digest of its settings as written, the same in every replica.
    pub digest: u64,
}

/// A whole, valid configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub gateway: GatewaySettings,
    /// Bearer tokens beside API keys (`gateway.auth`); applied on reload.
    pub auth: AuthSettings,
    pub upstreams: Vec<UpstreamSpec>,
    pub tenants: Vec<TenantSpec>,
    /// `telemetry.traces`: where spans go (the `OTEL_*` environment overrides it).
    pub traces: crate::telemetry::traces::TracesFile,
    /// The files it was read from (the config file, key files): a change to
    /// any of them is a reason to reload.
    pub sources: Vec<PathBuf>,
    /// `sha256:` of the text it was read from.
    pub digest: String,
}

/// `gateway.auth`: this gateway as an OAuth protected resource, and the
/// identity providers whose JWTs it accepts.
#[derive(Debug, Clone, Default)]
pub struct AuthSettings {
    /// This gateway's resource identifier (RFC 8707, RFC 9728).
    pub resource: Option<String>,
    pub issuers: Vec<crate::auth::IssuerSpec>,
    /// The gateway's own signing keys (`gateway.upstream_auth.signing_keys`),
    /// published at `/.well-known/jwks.json`.
    pub signing: Option<signing::SigningKeys>,
}

/// Where secrets referenced by the config (`env:`, `file:`) are read from; tests fake it.
pub trait Secrets {
    fn var(&self, name: &str) -> Option<String>;
    fn file(&self, path: &Path) -> Option<String>;
    /// Whether what it gives stands in for secrets that are not here (a
    /// check of a configuration that runs elsewhere): their values say
    /// nothing, and are not checked as values.
    fn stands_in(&self) -> bool {
        false
    }
}

/// For a configuration that runs elsewhere (`check --elsewhere`): every
/// `env:` and `file:` secret stands in as a value of its own, distinct per
/// name, so the rest is checked as if they were all there.
pub struct StandIns;

impl StandIns {
    fn value(kind: &str, name: &str) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(format!("{kind}:{name}"));
        let hex: String = digest.iter().take(20).map(|b| format!("{b:02x}")).collect();
        format!("stand-in-{hex}")
    }
}

impl Secrets for StandIns {
    fn var(&self, name: &str) -> Option<String> {
        Some(Self::value("env", name))
    }
    fn file(&self, path: &Path) -> Option<String> {
        Some(Self::value("file", &path.to_string_lossy()))
    }
    fn stands_in(&self) -> bool {
        true
    }
}

/// The process environment and the file system. Relative `file:` paths are
/// resolved against `base` (the configuration file's directory).
#[derive(Default)]
pub struct SystemSecrets {
    pub base: Option<PathBuf>,
    /// Every file read, for reload watching.
    pub read: std::sync::Mutex<Vec<PathBuf>>,
}

impl Secrets for SystemSecrets {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn file(&self, path: &Path) -> Option<String> {
        let path = match &self.base {
            Some(base) if path.is_relative() => base.join(path),
            _ => path.to_owned(),
        };
        if let Ok(mut read) = self.read.lock() {
            read.push(path.clone());
        }
        std::fs::read_to_string(path).ok()
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("not a valid configuration file: {0}")]
    Parse(String),
    #[error("{} problem(s) in the configuration:\n{}", .0.len(), .0.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<Problem>),
}

/// What a configuration is loaded for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `serve` and `check`: everything is read and checked.
    Serve,
    /// `stdio`: one tenant is served to the local agent that spawned the
    /// process, and nobody is authenticated, so the API keys, the admin
    /// token, the session secret and the identity providers are neither
    /// read nor checked: a host that spawns it from the config the server
    /// uses need not set their `env:` variables or mount their files.
    Stdio,
    /// `check --elsewhere`: checked as for `serve`, but the `env:` and
    /// `file:` secrets it names are not read (they exist where it runs).
    Elsewhere,
}

/// `sha256:` and the hex of a configuration's bytes.
pub fn text_digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let sum = sha2::Sha256::digest(bytes);
    let hex: String = sum.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

impl Config {
    /// Reads, parses and validates a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::load_for(path, Purpose::Serve)
    }

    /// Reads, parses and validates a file for `purpose`.
    pub fn load_for(path: &Path, purpose: Purpose) -> Result<Config, ConfigError> {
        Self::load_tracing(path, purpose).map_err(|(e, _)| e)
    }

    /// [`Self::load_for`]; a failure also says which files it read or
    /// tried to (the file and every `file:` it names), so that a watcher
    /// sees a key file appear after a reload was rejected for its absence.
    pub fn load_tracing(
        path: &Path,
        purpose: Purpose,
    ) -> Result<Config, (ConfigError, Vec<PathBuf>)> {
        let tried = |read: Vec<PathBuf>| std::iter::once(path.to_owned()).chain(read).collect();
        let text = std::fs::read_to_string(path).map_err(|source| {
            let e = ConfigError::Read {
                path: path.to_owned(),
                source,
            };
            (e, tried(Vec::new()))
        })?;
        let base = path.parent().map(Path::to_owned);
        let secrets = SystemSecrets {
            base: base.clone(),
            read: Default::default(),
        };
        let loaded = match purpose {
            Purpose::Elsewhere => Self::from_yaml_for(&text, &StandIns, purpose),
            _ => Self::from_yaml_for(&text, &secrets, purpose),
        };
        let read = secrets.read.into_inner().unwrap_or_default();
        // The reader's snippets name the file they quote.
        let loaded = loaded.map_err(|e| match e {
            ConfigError::Parse(m) => {
                ConfigError::Parse(m.replace("<input>", &path.display().to_string()))
            }
            e => e,
        });
        let mut config = loaded.map_err(|e| (e, tried(read.clone())))?;
        config.sources = tried(read);
        for issuer in &mut config.auth.issuers {
            if let (crate::auth::KeySource::File(file), Some(base)) = (&mut issuer.keys, &base) {
                if file.is_relative() {
                    *file = base.join(&*file);
                }
            }
        }
        if let (Some(pins), Some(base)) = (&mut config.gateway.pins_file, base) {
            if pins.is_relative() {
                *pins = base.join(&*pins);
            }
        }
        Ok(config)
    }

    /// Parses and validates YAML text.
    pub fn from_yaml(text: &str, secrets: &dyn Secrets) -> Result<Config, ConfigError> {
        Self::from_yaml_for(text, secrets, Purpose::Serve)
    }

    /// [`Self::from_yaml`] for `purpose`.
    pub fn from_yaml_for(
        text: &str,
        secrets: &dyn Secrets,
        purpose: Purpose,
    ) -> Result<Config, ConfigError> {
        let mut raw: raw::RawConfig = serde_saphyr::from_str(text).map_err(|e| {
            // The reader stops at its first mistake: the schema names them all.
            let all = shape::mistakes(text);
            match all.is_empty() {
                true => ConfigError::Parse(e.to_string()),
                false => ConfigError::Invalid(all),
            }
        })?;
        if purpose == Purpose::Stdio {
            if let Some(g) = &mut raw.gateway {
                g.admin_token = None;
                g.session_secret = None;
                g.auth = None;
            }
            for t in raw.tenants.values_mut() {
                t.api_keys.clear();
            }
        }
        let mut config = validate::validate(raw, secrets, purpose).map_err(ConfigError::Invalid)?;
        config.digest = text_digest(text.as_bytes());
        Ok(config)
    }

    pub fn upstream(&self, name: &str) -> Option<&UpstreamSpec> {
        self.upstreams.iter().find(|u| u.name == name)
    }
}
