//! Unit tests of `validate`.

use super::super::{Config, ConfigError, Secrets};
use super::*;

struct Fake;
impl Secrets for Fake {
    fn var(&self, name: &str) -> Option<String> {
        (name == "ACME_KEY").then(|| "from-env".into())
    }
    fn file(&self, path: &Path) -> Option<String> {
        (path == Path::new("/keys/acme")).then(|| "from-file\n".into())
    }
}

const ISSUE_EXAMPLE: &str = r#"
gateway:
  id: gateway                  # authority of namespaced mcpIds
  listen: 0.0.0.0:8080         # agents: POST /mcp
  admin_listen: 0.0.0.0:9090   # /metrics, /healthz, /readyz
upstreams:
  files:
    stdio: {command: python3, args: [server.py], env: {LOG_LEVEL: info}}
  search:
    http: {url: "http://search.internal:7001/mcp"}
    timeout_ms: 30000          # per upstream; calls past it fail with -32003
tenants:
  acme:
    api_keys: ["plain-token", "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "env:ACME_KEY", "file:/keys/acme"]
    upstreams: [files, search]
"#;

#[test]
fn the_documented_shape_loads() {
    let c = Config::from_yaml(ISSUE_EXAMPLE, &Fake).unwrap();
    assert_eq!(c.gateway.id, "gateway");
    assert_eq!(c.upstreams.len(), 2);
    let t = &c.tenants[0];
    assert_eq!(t.upstreams, ["files", "search"]);
    assert_eq!(t.keys.len(), 4);
    assert_eq!(t.keys[0], KeyDigest::of(b"plain-token"));
    assert_eq!(t.keys[1], KeyDigest::of(b"test"));
    assert_eq!(t.keys[2], KeyDigest::of(b"from-env"));
    assert_eq!(t.keys[3], KeyDigest::of(b"from-file"));
    assert_eq!(
        c.upstream("search").unwrap().timeout,
        Duration::from_secs(30)
    );
}

#[test]
fn a_child_per_session_is_for_stdio_children_of_the_model_context_protocol() {
    let text = r#"
upstreams:
  a: {stdio: {command: x}, protocol: modelcontextprotocol, per_session: true, max_children: 2, idle_timeout_ms: 1000}
  b: {stdio: {command: x}, protocol: modelcontextprotocol}
tenants:
  t: {api_keys: [k], upstreams: [a, b]}
"#;
    let c = Config::from_yaml(text, &Fake).unwrap();
    let a = c.upstream("a").unwrap();
    assert!(a.per_session && !a.shared);
    assert_eq!(
        a.children,
        ChildBounds {
            max_children: 2,
            idle_timeout: Duration::from_secs(1)
        }
    );
    let b = c.upstream("b").unwrap();
    assert!(!b.per_session && !b.shared);
    assert_eq!(b.children, ChildBounds::default());
    let text = r#"
upstreams:
  a: {stdio: {command: x}, protocol: v1, per_session: true}
  b: {http: {url: "http://x/mcp"}, protocol: modelcontextprotocol, per_session: true}
  c: {stdio: {command: x}, protocol: modelcontextprotocol, max_children: 3}
  d: {stdio: {command: x}, protocol: modelcontextprotocol, per_session: true, max_children: 0, idle_timeout_ms: 0}
  e: {stdio: {command: x}, shared: true, idle_timeout_ms: 1000}
tenants:
  t: {api_keys: [k], upstreams: [a, b, c, d, e]}
"#;
    let Err(ConfigError::Invalid(problems)) = Config::from_yaml(text, &Fake) else {
        panic!("accepted")
    };
    let text = problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    for at in [
        "upstreams.a.per_session",
        "upstreams.b.per_session",
        "upstreams.c.max_children",
        "upstreams.d.max_children",
        "upstreams.d.idle_timeout_ms",
        "upstreams.e.idle_timeout_ms",
    ] {
        assert!(text.contains(at), "{at} missing from:\n{text}");
    }
}

#[test]
fn config_cannot_break_the_wire_or_leak_a_url() {
    let text = r#"
upstreams:
  a:
    http:
      url: "http://user:s3cret@x/mcp"
  b:
    http:
      url: "http://x/mcp"
      headers: {Host: y, content-length: "3", Transfer-Encoding: chunked, Connection: close, TE: trailers, x-api-key: fine}
  c:
    http: {url: "ftp://x/y?token=s3cret"}
tenants:
  t:
    api_keys: [k]
    upstreams: [a, b, c]
    tools: {allow: ["mcp://g/{a"], deny: ["[z"]}
"#;
    let Err(ConfigError::Invalid(problems)) = Config::from_yaml(text, &Fake) else {
        panic!("accepted")
    };
    let text = problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    for at in [
        "upstreams.a.http.url",
        "upstreams.b.http.headers.Host",
        "upstreams.b.http.headers.content-length",
        "upstreams.b.http.headers.Transfer-Encoding",
        "upstreams.b.http.headers.Connection",
        "upstreams.b.http.headers.TE",
        "upstreams.c.http.url",
        "tenants.t.tools.allow[0]",
        "tenants.t.tools.deny[0]",
    ] {
        assert!(text.contains(at), "{at} missing from:\n{text}");
    }
    assert!(!text.contains("x-api-key"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}

#[test]
fn upstream_header_values_come_from_env_and_files() {
    let text = r#"
upstreams:
  up:
    http:
      url: "http://x/mcp"
      headers: {Authorization: "env:ACME_KEY", x-token: "file:/keys/acme", x-plain: "Bearer abc"}
tenants:
  a: {api_keys: [k], upstreams: [up]}
"#;
    let config = Config::from_yaml(text, &Fake).unwrap();
    let TransportSpec::Http(http) = &config.upstreams[0].transport else {
        panic!("an HTTP upstream")
    };
    assert_eq!(http.headers["Authorization"], "from-env");
    assert_eq!(
        http.headers["x-token"], "from-file",
        "one trailing newline dropped"
    );
    assert_eq!(http.headers["x-plain"], "Bearer abc");
    let missing = text.replace("file:/keys/acme", "file:/keys/gone");
    let Err(ConfigError::Invalid(problems)) = Config::from_yaml(&missing, &Fake) else {
        panic!("should fail")
    };
    assert_eq!(problems[0].path, "upstreams.up.http.headers.x-token");
    assert!(problems[0].message.contains("cannot be read"));
}

#[test]
fn identity_providers_are_checked() {
    let good = r#"
gateway:
  auth:
    resource: "https://gateway.example.com/mcp"
    jwt:
      - issuer: "https://idp.example.com/realms/agents"
        jwks_url: "http://keycloak.idp.svc:8080/realms/agents/protocol/openid-connect/certs"
        tenant_claim: tenant
      - issuer: "https://other.example.com"
        audiences: [api://gateway]
        jwks_file: jwks.json
        tenant: acme
tenants:
  acme: {upstreams: []}
"#;
    let config = Config::from_yaml(good, &Fake).unwrap();
    let issuers = &config.auth.issuers;
    assert_eq!(issuers.len(), 2);
    assert_eq!(
        issuers[0].audiences,
        ["https://gateway.example.com/mcp"],
        "the resource by default"
    );
    assert_eq!(issuers[1].tenant, TenantFrom::Fixed("acme".into()));
    assert_eq!(issuers[0].leeway, Duration::from_secs(30));
    let bad = r#"
gateway:
  auth:
    jwt:
      - issuer: "https://idp.example.com"
        jwks_url: "ftp://idp.example.com/keys"
        tenant: ghost
      - issuer: "https://idp.example.com"
        jwks_url: "https://a/keys"
        jwks_file: keys.json
        tenant_claim: tenant
        tenant: acme
        leeway_s: 3600
        refresh_s: 1
tenants:
  acme: {upstreams: []}
  lone: {upstreams: []}
"#;
    let Err(ConfigError::Invalid(problems)) = Config::from_yaml(bad, &Fake) else {
        panic!("should fail")
    };
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    for expected in [
        "gateway.auth.resource",
        "gateway.auth.jwt[0].jwks_url",
        "gateway.auth.jwt[0].tenant",
        "gateway.auth.jwt[1].issuer",
        "gateway.auth.jwt[1]",
        "gateway.auth.jwt[1].leeway_s",
        "gateway.auth.jwt[1].refresh_s",
        "tenants.lone.api_keys",
    ] {
        assert!(paths.contains(&expected), "missing {expected} in {paths:?}");
    }
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = r#"
gateway: {id: "bad id", listen: nowhere}
upstreams:
  "bad/name": {stdio: {command: x}}
  empty: {stdio: {command: ""}}
  url: {http: {url: "ftp://x/y"}}
  both: {stdio: {command: x}, http: {url: "http://x"}}
  neither: {timeout_ms: 0}
  pinned: {stdio: {command: x}, pin: true}
tenants:
  a: {api_keys: [k1, "env:MISSING"], upstreams: [empty, ghost], tools: {deny: ["[unclosed"]}}
  b: {api_keys: [k1, "sha256:zz"], upstreams: []}
"#;
    let Err(ConfigError::Invalid(problems)) = Config::from_yaml(text, &Fake) else {
        panic!("should fail")
    };
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    for expected in [
        "gateway.id",
        "gateway.listen",
        "upstreams.bad/name",
        "upstreams.empty.stdio.command",
        "upstreams.url.http.url",
        "upstreams.both",
        "upstreams.neither.timeout_ms",
        "upstreams.neither",
        "upstreams.pinned.pin",
        "tenants.a.api_keys[1]",
        "tenants.a.upstreams[1]",
        "tenants.a.tools.deny[0]",
        "tenants.b.api_keys[0]",
        "tenants.b.api_keys[1]",
    ] {
        assert!(paths.contains(&expected), "missing {expected} in {paths:?}");
    }
    let text = ConfigError::Invalid(problems).to_string();
    assert!(!text.contains("k1"), "a key leaked into an error: {text}");
    assert!(text.contains("unknown upstream 'ghost'"));
}

#[test]
fn unknown_fields_and_duplicate_names_are_errors() {
    let typo = "gateway: {id: g, lisen: 1}\ntenants: {}\n";
    let Err(ConfigError::Invalid(problems)) = Config::from_yaml(typo, &Fake) else {
        panic!("a typo accepted")
    };
    assert!(problems[0].to_string().contains("lisen"), "{problems:?}");
    let dup = "upstreams:\n  a: {stdio: {command: x}}\n  a: {stdio: {command: y}}\ntenants:\n  t: {api_keys: [k], upstreams: [a]}\n";
    assert!(matches!(
        Config::from_yaml(dup, &Fake),
        Err(ConfigError::Parse(_))
    ));
}
