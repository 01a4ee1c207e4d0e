//! Fuzz target: see `mcp_gateway::fuzzing::http_response`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcp_gateway::fuzzing::http_response(data));
