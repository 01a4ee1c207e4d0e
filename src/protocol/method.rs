//! The MCP methods the gateway knows, as a closed set (also used as a metric label).

/// An MCP v1.0 method name, or `Other` for anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Initialize,
    Initialized,
    ListTools,
    ListResources,
    ListPrompts,
    ExecuteTool,
    ResourceDidChange,
    Other,
}

impl Method {
    pub fn parse(name: &str) -> Self {
        match name {
            "initialize" => Self::Initialize,
            "initialized" => Self::Initialized,
            "mcp/listTools" => Self::ListTools,
            "mcp/listResources" => Self::ListResources,
            "mcp/listPrompts" => Self::ListPrompts,
            "mcp/executeTool" => Self::ExecuteTool,
            "mcp/resourceDidChange" => Self::ResourceDidChange,
            _ => Self::Other,
        }
    }

    /// The wire name; `Other` has none and reads as "other" (for metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Initialize => "initialize",
            Self::Initialized => "initialized",
            Self::ListTools => "mcp/listTools",
            Self::ListResources => "mcp/listResources",
            Self::ListPrompts => "mcp/listPrompts",
            Self::ExecuteTool => "mcp/executeTool",
            Self::ResourceDidChange => "mcp/resourceDidChange",
            Self::Other => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in [
            Method::Initialize,
            Method::Initialized,
            Method::ListTools,
            Method::ListResources,
            Method::ListPrompts,
            Method::ExecuteTool,
            Method::ResourceDidChange,
        ] {
            assert_eq!(Method::parse(m.as_str()), m);
        }
        assert_eq!(Method::parse("mcp/listtools"), Method::Other);
    }
}
