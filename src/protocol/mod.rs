//! MCP v1.0 on top of JSON-RPC: methods, capabilities, definition checks,
//! the namespaced mcpId scheme and the per-upstream catalog, and a tool
//! call's result in neither protocol's shape. No I/O here.

pub mod bounds;
pub mod capabilities;
pub mod catalog;
pub mod definitions;
pub mod fingerprint;
pub mod instance;
pub mod mcpid;
pub mod method;
pub mod schema;
pub mod tool_result;

pub use capabilities::Capabilities;
pub use catalog::{Catalog, ToolEntry};
pub use definitions::Kind;
pub use method::Method;
