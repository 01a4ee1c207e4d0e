//! `mcp-gateway`: the command line. Thin: parse, set up logging, load the
//! config, run until a signal.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use mcp_gateway::config::Config;
use mcp_gateway::demo::{self, DemoOptions, DemoServer};
use mcp_gateway::telemetry::{self, LogFormat};

#[derive(Parser)]
#[command(
    name = "mcp-gateway",
    version,
    about = "A multi-tenant gateway: one URL for agents of the Model Context Protocol (both eras) and of MCP v1.0, in front of many stdio and HTTP tool servers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum PinsCommand {
    /// Print the definitions waiting for review, each with a diff against
    /// the pinned one (what GET /pins on the admin listener answers).
    List {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Pin what waits for review, so those tools serve (without --tool:
    /// every definition pending, not those rejected).
    Approve {
        #[arg(long, short)]
        config: PathBuf,
        /// Only this upstream's tools.
        #[arg(long)]
        upstream: Option<String>,
        /// Only this tool (the upstream's own id, as in the pins file).
        #[arg(long)]
        tool: Option<String>,
        /// Only if this is the definition waiting (its fingerprint).
        #[arg(long, requires = "tool")]
        fingerprint: Option<String>,
    },
    /// Keep a waiting definition out: the tool stays quarantined until one
    /// is approved or the upstream lists a pinned definition under its id.
    Reject {
        #[arg(long, short)]
        config: PathBuf,
        #[arg(long)]
        upstream: String,
        #[arg(long)]
        tool: String,
        /// Only if this is the definition waiting (its fingerprint).
        #[arg(long)]
        fingerprint: Option<String>,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (without --config: the embedded demo on 127.0.0.1:8080 and :9090).
    Serve {
        /// The YAML configuration file.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Override gateway.listen (e.g. 127.0.0.1:0 for a free port).
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// Override gateway.admin_listen.
        #[arg(long)]
        admin_listen: Option<SocketAddr>,
        /// Log format (default: text on a terminal, json otherwise).
        #[arg(long, value_enum)]
        log_format: Option<LogFormat>,
        /// Runtime worker threads (default: one per CPU the process is given,
        /// within its cgroup's CPU quota; one means the current-thread runtime).
        #[arg(long, env = "MCP_GATEWAY_WORKERS")]
        workers: Option<usize>,
    },
    /// Serve one tenant to one local agent over stdin/stdout (MCP v1.0 in Content-Length
    /// frames, or newline-delimited JSON when the first byte is `{`: the Model Context Protocol).
    Stdio {
        /// Without it: the embedded demo (tenant `demo`), as `serve` runs it.
        #[arg(long, short, requires = "tenant")]
        config: Option<PathBuf>,
        /// The tenant whose upstreams the agent sees (with --config).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Validate a configuration file, report every problem, and exit.
    Check {
        #[arg(long, short, required_unless_present = "schema")]
        config: Option<PathBuf>,
        /// Do not look stdio upstreams' commands up on this machine, nor read
        /// its env: and file: secrets (the configuration runs elsewhere, such
        /// as in the container image).
        #[arg(long)]
        elsewhere: bool,
        /// Print the configuration file's JSON Schema (for editors and the
        /// YAML language server) and exit.
        #[arg(long, conflicts_with_all = ["config", "elsewhere"])]
        schema: bool,
    },
    /// The demo MCP server that ships with the gateway (stdio, or HTTP with --http).
    #[command(hide = true)]
    DemoUpstream {
        #[arg(long)]
        http: Option<SocketAddr>,
        #[arg(long, default_value = "demo")]
        name: String,
        #[arg(long)]
        test_tools: bool,
        #[arg(long)]
        no_execute: bool,
        #[arg(long)]
        record: Option<PathBuf>,
        #[arg(long)]
        description_suffix: Option<String>,
        /// This many more (generated, listed-only) tools, for scale benchmarks.
        #[arg(long, default_value_t = 0)]
        extra_tools: usize,
        /// Speak the Model Context Protocol (handshake era; Streamable HTTP
        /// answering JSON, or stdio one message per line) instead of MCP v1.0.
        #[arg(long)]
        modelcontext: bool,
        /// With --modelcontext: say in tools/list that the listing may be
        /// kept this long (`ttlMs`).
        #[arg(long)]
        listing_ttl_ms: Option<u64>,
    },
    /// Definition pins (rug-pull defence): approve changed tool definitions.
    Pins {
        #[command(subcommand)]
        command: PinsCommand,
    },
}

fn main() -> ExitCode {
    let code = run(Cli::parse());
    telemetry::flush();
    code
}

fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve {
            config,
            listen,
            admin_listen,
            log_format,
            workers,
        } => serve_command(config, listen, admin_listen, log_format, workers),
        Command::Stdio { config, tenant } => stdio_command(config, tenant),
        Command::Check { schema: true, .. } => {
            let schema = mcp_gateway::config::raw::schema();
            println!(
                "{}",
                serde_json::to_string_pretty(&schema).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Command::Check { config: None, .. } => ExitCode::FAILURE,
        Command::Check {
            config: Some(config),
            elsewhere,
            ..
        } => check_command(&config, elsewhere),
        Command::Pins { command } => pins_command(&command),
        Command::DemoUpstream {
            http,
            name,
            test_tools,
            no_execute,
            record,
            description_suffix,
            extra_tools,
            modelcontext,
            listing_ttl_ms,
        } => {
            let opts = DemoOptions {
                name,
                test_tools,
                no_execute,
                record,
                description_suffix,
                extra_tools,
                modelcontext,
                listing_ttl_ms,
            };
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return ExitCode::FAILURE;
            };
            rt.block_on(demo_upstream(opts, http))
        }
    }
}

/// `serve`: the runtime (one worker per CPU given, by default), then the gateway.
fn serve_command(
    config: Option<PathBuf>,
    listen: Option<SocketAddr>,
    admin_listen: Option<SocketAddr>,
    log_format: Option<LogFormat>,
    workers: Option<usize>,
) -> ExitCode {
    let format = log_format.unwrap_or(if std::io::stderr().is_terminal() {
        LogFormat::Text
    } else {
        LogFormat::Json
    });
    telemetry::init(format);
    // One worker: a current-thread runtime, with no cross-thread
    // wake-ups. By default, one worker per CPU the pod is given
    // (its cgroup quota counts), so one CPU gets that runtime.
    let workers = workers.unwrap_or_else(mcp_gateway::cpus::given).max(1);
    let mut rt = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    if workers > 1 {
        rt.worker_threads(workers);
    }
    tracing::info!(workers, "runtime");
    let Ok(rt) = rt.enable_all().build() else {
        eprintln!("mcp-gateway: cannot start the async runtime");
        return ExitCode::FAILURE;
    };
    rt.block_on(serve(config, listen, admin_listen))
}

/// `stdio`: one agent over stdin and stdout, on `config` or the embedded demo.
fn stdio_command(config: Option<PathBuf>, tenant: Option<String>) -> ExitCode {
    // stdout carries frames only: logs go to stderr, as text unless redirected.
    telemetry::init(if std::io::stderr().is_terminal() {
        LogFormat::Text
    } else {
        LogFormat::Json
    });
    let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    else {
        return ExitCode::FAILURE;
    };
    let tenant = tenant.unwrap_or_else(|| "demo".into());
    let served = rt.block_on(async {
        let config = match &config {
            Some(path) => Config::load_for(path, mcp_gateway::config::Purpose::Stdio)
                .map_err(|e| format!("{}: {e}", path.display()))?,
            None => embedded_demo().await?,
        };
        mcp_gateway::stdio_mode::run(config, &tenant)
            .await
            .map_err(|e| e.to_string())
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-gateway: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `check`: the file's problems, with their paths, and what the gateway
/// would meet at run time (commands not on the child's PATH).
fn check_command(config: &std::path::Path, elsewhere: bool) -> ExitCode {
    let purpose = match elsewhere {
        true => mcp_gateway::config::Purpose::Elsewhere,
        false => mcp_gateway::config::Purpose::Serve,
    };
    match Config::load_for(config, purpose) {
        Ok(c) if !elsewhere && !cannot_start(&c).is_empty() => {
            let problems = cannot_start(&c);
            eprintln!(
                "{}: {} problem(s) the gateway would meet at run time:",
                config.display(),
                problems.len()
            );
            for p in problems {
                eprintln!("  - {p}");
            }
            ExitCode::FAILURE
        }
        Ok(c) => {
            println!(
                "{}: ok ({} upstreams, {} tenants)",
                config.display(),
                c.upstreams.len(),
                c.tenants.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}: {e}", config.display());
            // The commands are looked up in the same run, from the file
            // as written, so that a missing executable is not news at
            // the next one.
            let missing = if elsewhere {
                Vec::new()
            } else {
                commands_not_found(config)
            };
            if !missing.is_empty() {
                eprintln!(
                    "{}: and {} problem(s) the gateway would meet at run time:",
                    config.display(),
                    missing.len()
                );
                for p in missing {
                    eprintln!("  - {p}");
                }
            }
            ExitCode::FAILURE
        }
    }
}

async fn serve(
    config_file: Option<PathBuf>,
    listen: Option<SocketAddr>,
    admin_listen: Option<SocketAddr>,
) -> ExitCode {
    let loaded = match &config_file {
        Some(path) => Config::load(path).map_err(|e| e.to_string()),
        None => {
            tracing::info!(
                "no --config given: serving the embedded demo (tenant 'demo', key 'demo-key')"
            );
            embedded_demo().await
        }
    };
    let mut config = match loaded {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "invalid configuration");
            eprintln!("mcp-gateway: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Only a config file is watched for changes; the embedded demo is not.
    let config_path = config_file.clone();
    if let Some(a) = listen {
        config.gateway.listen = a;
        config.gateway.fixed.listen = true;
    }
    if let Some(a) = admin_listen {
        config.gateway.admin_listen = a;
        config.gateway.fixed.admin_listen = true;
    }
    if let Some(limit) = mcp_gateway::descriptors::raise_limit() {
        let room = mcp_gateway::descriptors::agent_connections(limit);
        let limits = &mut config.gateway.limits;
        if limits.max_connections > room {
            tracing::warn!(
                max_connections = limits.max_connections,
                descriptors = limit,
                kept = room,
                "gateway.limits.max_connections is more than the descriptor limit leaves room for; connections past the lower cap wait to be accepted"
            );
            limits.max_connections = room;
            limits.max_connections_per_tenant = limits.max_connections_per_tenant.min(room);
            config.gateway.fixed.connections = Some(room);
        }
    }
    let running = match mcp_gateway::app::start(config, config_path).await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot start");
            eprintln!("mcp-gateway: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    wait_for_signal().await;
    running.shutdown().await;
    ExitCode::SUCCESS
}

/// What a valid configuration would still fail at when the gateway runs it:
/// stdio upstreams whose command the child cannot be started with.
fn cannot_start(config: &Config) -> Vec<String> {
    config
        .upstreams
        .iter()
        .filter_map(|u| match &u.transport {
            mcp_gateway::config::TransportSpec::Stdio(spec) => {
                mcp_gateway::upstream::stdio::locate(spec)
                    .err()
                    .map(|why| format!("upstreams.{}.stdio.command: {why}", u.name))
            }
            mcp_gateway::config::TransportSpec::Http(_) => None,
        })
        .collect()
}

/// The stdio commands of a file that did not load, looked up as `serve`
/// would start them: read from the YAML as written.
fn commands_not_found(path: &std::path::Path) -> Vec<String> {
    use mcp_gateway::config::StdioSpec;
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let Ok(file) = serde_saphyr::from_str::<serde_json::Value>(&text) else {
        return Vec::new();
    };
    let Some(upstreams) = file["upstreams"].as_object() else {
        return Vec::new();
    };
    let text_of = |v: &serde_json::Value| v.as_str().map(str::to_owned);
    upstreams
        .iter()
        .filter_map(|(name, u)| {
            let stdio = &u["stdio"];
            let spec = StdioSpec {
                command: text_of(&stdio["command"]).filter(|c| !c.trim().is_empty())?,
                args: Vec::new(),
                env: stdio["env"]
                    .as_object()
                    .map(|env| {
                        env.iter()
                            .filter_map(|(k, v)| Some((k.clone(), text_of(v)?)))
                            .collect()
                    })
                    .unwrap_or_default(),
                cwd: text_of(&stdio["cwd"]).map(PathBuf::from),
            };
            let why = mcp_gateway::upstream::stdio::locate(&spec).err()?;
            Some(format!("upstreams.{name}.stdio.command: {why}"))
        })
        .collect()
}

async fn wait_for_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupt received"),
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => tracing::info!("SIGTERM received"),
    }
}

/// `mcp-gateway pins ...` (see `upstream::pins::cli`).
fn pins_command(command: &PinsCommand) -> ExitCode {
    use mcp_gateway::upstream::pins::cli::{Action, run};
    match command {
        PinsCommand::List { config } => run(config, Action::List),
        PinsCommand::Approve {
            config,
            upstream,
            tool,
            fingerprint,
        } => run(
            config,
            Action::Decide {
                approve: true,
                upstream: upstream.as_deref(),
                tool: tool.as_deref(),
                fingerprint: fingerprint.as_deref(),
            },
        ),
        PinsCommand::Reject {
            config,
            upstream,
            tool,
            fingerprint,
        } => run(
            config,
            Action::Decide {
                approve: false,
                upstream: Some(upstream),
                tool: Some(tool),
                fingerprint: fingerprint.as_deref(),
            },
        ),
    }
}

/// The embedded demo's configuration, its `remote` upstream started on a
/// free loopback port of this process (it runs as long as the runtime).
async fn embedded_demo() -> Result<Config, String> {
    let server = DemoServer::new(DemoOptions {
        name: "remote".into(),
        ..DemoOptions::default()
    })
    .map_err(|e| format!("cannot create the demo upstream: {e}"))?;
    let (addr, _task) = demo::http::start(Arc::new(server), ([127, 0, 0, 1], 0).into())
        .await
        .map_err(|e| format!("cannot start the demo HTTP upstream: {e}"))?;
    demo::demo_config(&format!("http://{addr}/mcp")).map_err(|e| e.to_string())
}

async fn demo_upstream(opts: DemoOptions, http: Option<SocketAddr>) -> ExitCode {
    let server = match DemoServer::new(opts) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!("demo-upstream: {e}");
            return ExitCode::FAILURE;
        }
    };
    match http {
        None => match if server.modelcontext() {
            demo::modelcontext::serve_stdio(server).await
        } else {
            demo::stdio::serve(server).await
        } {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("demo-upstream: {e}");
                ExitCode::FAILURE
            }
        },
        Some(addr) => match demo::http::start(server, addr).await {
            Ok((bound, task)) => {
                // The only stdout line: where it listens, for whoever started it.
                println!("listening on http://{bound}/mcp");
                let _ = task.await;
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("demo-upstream: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
