//! The `ServerCapabilities` object of the handshake.

use serde::{Deserialize, Serialize};

use super::Method;

/// `executionProvider` of the capabilities object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionProvider {
    #[serde(default)]
    pub execute: bool,
}

/// What a server declares it provides. Read leniently (absent flags are false),
/// written exactly as the spec's interface (all three list flags present).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    #[serde(default)]
    pub list_tools_provider: bool,
    #[serde(default)]
    pub list_resources_provider: bool,
    #[serde(default)]
    pub list_prompts_provider: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_provider: Option<ExecutionProvider>,
}

impl Capabilities {
    pub fn can_execute(&self) -> bool {
        self.execution_provider.is_some_and(|e| e.execute)
    }

    /// Whether a server with these capabilities may be sent `method`.
    pub fn allows(&self, method: Method) -> bool {
        match method {
            Method::ListTools => self.list_tools_provider,
            Method::ListResources => self.list_resources_provider,
            Method::ListPrompts => self.list_prompts_provider,
            Method::ExecuteTool => self.can_execute(),
            Method::Initialize | Method::Initialized => true,
            Method::ResourceDidChange | Method::Other => false,
        }
    }

    /// The union: what either side provides.
    pub fn union(self, other: Self) -> Self {
        let execute = self.can_execute() || other.can_execute();
        Self {
            list_tools_provider: self.list_tools_provider || other.list_tools_provider,
            list_resources_provider: self.list_resources_provider || other.list_resources_provider,
            list_prompts_provider: self.list_prompts_provider || other.list_prompts_provider,
            execution_provider: (execute
                || self.execution_provider.is_some()
                || other.execution_provider.is_some())
            .then_some(ExecutionProvider { execute }),
        }
    }
}

/// `result` of `initialize`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct InitializeResult {
    pub capabilities: Capabilities,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_and_allows() {
        let tools: Capabilities = serde_json::from_str(
            r#"{"listToolsProvider":true,"listResourcesProvider":false,"listPromptsProvider":false,"executionProvider":{"execute":true}}"#,
        )
        .unwrap();
        let prompts: Capabilities =
            serde_json::from_str(r#"{"listPromptsProvider":true}"#).unwrap();
        let u = tools.union(prompts);
        assert!(
            u.allows(Method::ListTools)
                && u.allows(Method::ListPrompts)
                && u.allows(Method::ExecuteTool)
        );
        assert!(!u.allows(Method::ListResources));
        assert!(!prompts.allows(Method::ExecuteTool));
        assert_eq!(
            serde_json::to_string(&prompts).unwrap(),
            r#"{"listToolsProvider":false,"listResourcesProvider":false,"listPromptsProvider":true}"#
        );
    }
}
