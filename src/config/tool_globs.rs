//! A tenant's `tools.allow` and `tools.deny`, compiled.

/// A tenant's tool policy as compiled globs (`*` also matches `/`). They are
/// compiled once, when the config is validated; a pattern that does not
/// compile is a config error, never a rule that is skipped.
#[derive(Debug, Clone, Default)]
pub struct ToolGlobs {
    /// `None`: every tool not denied.
    pub allow: Option<globset::GlobSet>,
    pub deny: globset::GlobSet,
    /// `tools.scopes`: a tool matching a glob needs that scope in the
    /// caller's token (API keys hold every scope).
    pub scoped: Vec<(globset::GlobMatcher, String)>,
    /// The `deny` patterns as written, in the set's order (to name the one
    /// that matched).
    pub deny_globs: Vec<String>,
}

impl ToolGlobs {
    /// Compiles both lists; `Err` names the first pattern that does not
    /// compile, by list and index, and why.
    pub fn compile(
        allow: &[impl AsRef<str>],
        deny: &[impl AsRef<str>],
    ) -> Result<Self, (&'static str, usize, String)> {
        Ok(ToolGlobs {
            allow: if allow.is_empty() {
                None
            } else {
                Some(set("allow", allow)?)
            },
            deny: set("deny", deny)?,
            scoped: Vec::new(),
            deny_globs: deny.iter().map(|d| d.as_ref().to_owned()).collect(),
        })
    }

    /// Whether there is nothing to enforce.
    pub fn is_empty(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty()
    }
}

/// One list of patterns as a glob set.
fn set(
    list: &'static str,
    patterns: &[impl AsRef<str>],
) -> Result<globset::GlobSet, (&'static str, usize, String)> {
    let mut b = globset::GlobSetBuilder::new();
    for (i, p) in patterns.iter().enumerate() {
        let p = p.as_ref();
        let glob = globset::Glob::new(p)
            .map_err(|e| (list, i, format!("'{p}' is not a glob: {}", e.kind())))?;
        b.add(glob);
    }
    b.build().map_err(|e| (list, 0, e.to_string()))
}
