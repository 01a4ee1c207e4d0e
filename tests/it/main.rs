//! Integration tests: real processes, real sockets on 127.0.0.1 port 0.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests and their helpers fail loudly by design"
)]

mod acting;
mod architecture;
mod asks;
mod audit;
pub(crate) mod binary;
mod browser;
mod budgets;
mod caching;
mod compliance;
mod conformance;
mod consent;
mod console;
mod console_api;
mod console_plain;
mod curation;
mod deploy;
mod detect;
mod discovery;
mod edge;
mod fuzz_corpus;
mod hardening;
mod house;
mod idp;
mod isolation;
pub(crate) mod jwt;
mod mcp_sessions;
mod modelcontext;
mod modelcontext_clients;
mod newcomer;
mod ops;
mod pins;
mod progress;
mod raw_http;
mod readme;
mod reload;
mod replica_relay;
mod replicas;
mod resilience;
mod rounds;
mod routing;
mod schema;
mod sessions;
mod stateless;
mod stdio_mode;
mod stdio_upstream;
mod store_counts;
mod support;
mod surface;
mod tasks;
mod traces;
mod upstream_auth;
