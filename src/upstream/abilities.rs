//! What an upstream can do, as its handshake and listings told: its own
//! names for definitions, completions, tasks, the stateless revision,
//! requests and logs during calls.

use std::sync::Arc;

use crate::protocol::Kind;

use super::*;

impl Upstream {
    /// The table of calls waiting for progress, which the upstream's links
    /// hand its `notifications/progress` to as they hear them.
    pub fn progress(&self) -> &Arc<progress::Progress> {
        &self.progress
    }

    /// The upstream's own name (or uri) for a definition of this kind, from
    /// the original id the catalog holds it by: what a face calls it. An MCP
    /// v1.0 upstream's own is that id; `None` when it is not one of this kind.
    pub fn own_key(&self, kind: Kind, original: &str) -> Option<String> {
        match self.dialect() {
            Dialect::ModelContext => crate::modelcontext::key_of(kind, original),
            Dialect::V1 => Some(original.to_owned()),
        }
    }

    /// Whether it lists prompts and resource templates of its own shape
    /// (prompts with arguments, uri templates), which a face that can carry
    /// them lists as the upstream did rather than from the catalog.
    pub fn lists_its_own(&self) -> bool {
        self.dialect() == Dialect::ModelContext
    }

    /// The prompts an upstream of the Model Context Protocol last listed, as
    /// it listed them, arguments and all (none for an MCP v1.0 upstream).
    pub fn own_prompts(&self) -> Arc<Vec<serde_json::Map<String, serde_json::Value>>> {
        match self.dialect() {
            Dialect::ModelContext => self.mc.own_prompts(),
            Dialect::V1 => Arc::default(),
        }
    }

    /// The resource templates an upstream of the Model Context Protocol last
    /// listed, as it listed them (none for an MCP v1.0 upstream).
    pub fn own_templates(&self) -> Arc<Vec<serde_json::Map<String, serde_json::Value>>> {
        match self.dialect() {
            Dialect::ModelContext => self.mc.own_templates(),
            Dialect::V1 => Arc::default(),
        }
    }

    /// Whether it answers `completion/complete` (an upstream of the Model
    /// Context Protocol that declared `completions`).
    pub fn completes(&self) -> bool {
        self.dialect() == Dialect::ModelContext && self.mc.completes()
    }

    /// What it declared of the 2025-11-25 revision's tasks (none for MCP v1.0).
    pub fn tasks(&self) -> crate::modelcontext::TaskCaps {
        match self.dialect() {
            Dialect::ModelContext => self.mc.tasks(),
            Dialect::V1 => crate::modelcontext::TaskCaps::default(),
        }
    }

    /// Whether a 2026-07-28 client's calls reach it in that revision: a
    /// Streamable HTTP upstream of the protocol that takes it (not one
    /// whose calls run on a child per session).
    pub fn speaks_stateless(&self) -> bool {
        self.dialect() == Dialect::ModelContext && !self.runs_children() && self.mc.stateless()
    }

    /// Whether its requests during a call can be told to be that call's: a
    /// Streamable HTTP upstream of the protocol (each call's requests come
    /// on its own stream), not one run as a child per session.
    pub fn asks_during_calls(&self) -> bool {
        self.dialect() == Dialect::ModelContext
            && !self.runs_children()
            && read(&self.link).is_some_and(|link| link.as_streamable().is_some())
    }

    /// Whether any upstream at all may log during calls (see
    /// [`Self::logs_during_calls`]): `false` until one declared `logging`.
    pub fn some_may_log() -> bool {
        modelcontext::SOME_UPSTREAM_LOGS.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether its log lines during a call can be told to be that call's
    /// (see [`Self::asks_during_calls`]), and it declared it logs.
    pub fn logs_during_calls(&self) -> bool {
        self.dialect() == Dialect::ModelContext && self.mc.logs() && self.asks_during_calls()
    }
}
