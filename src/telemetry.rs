//! Logging: `tracing` to stderr (stdout may carry protocol frames), JSON by
//! default for log stacks, or human text. Filter with `MCP_GATEWAY_LOG`
//! (e.g. `info`, `mcp_gateway=debug`).

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_env("MCP_GATEWAY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
