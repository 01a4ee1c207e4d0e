//! Browsers at the agent edge. A page may call the gateway only from an
//! origin in `gateway.allowed_origins`: any request with another `Origin`
//! (a preflight included) is refused with 403 before anything else, which
//! keeps a page that a DNS rebinding points at the gateway out; a listed
//! origin gets the CORS answers a browser needs (tower-http's layer): its
//! preflight is answered, and its responses let the page read them and
//! their `Mcp-Session-Id` and `WWW-Authenticate`.
//!
//! Requests that carry `Origin` are served on hyper's path (the edge's own
//! path hands them over), so this wraps that path only.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::response::Response;
use tower_http::cors::{AllowHeaders, AllowOrigin, Cors, CorsLayer, ExposeHeaders};

/// How long a browser may keep a preflight's answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

type Request = hyper::Request<hyper::body::Incoming>;

/// Answers a request whose origin is not listed (403); `None` for the others.
pub(super) type Refusal = Arc<dyn Fn(&Request) -> Option<Response> + Send + Sync>;

/// The CORS rules for the listed origins (compared as the origin check
/// compares them: trimmed, lowercase).
pub(super) fn layer(allowed: &[String]) -> CorsLayer {
    let allowed: Arc<[String]> = allowed.into();
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin: &HeaderValue, _| {
            origin
                .to_str()
                .is_ok_and(|o| allowed.contains(&o.trim().to_ascii_lowercase()))
        }))
        .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
        // Authorization, Content-Type, Mcp-Session-Id, MCP-Protocol-Version,
        // Last-Event-ID, Mcp-Method, Mcp-Name, and the Mcp-Param-{Name}
        // headers a tool's schema names: whatever the page asks for, which
        // only listed origins are told.
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers(ExposeHeaders::list([
            HeaderName::from_static("mcp-session-id"),
            header::WWW_AUTHENTICATE,
            header::RETRY_AFTER,
            HeaderName::from_static("x-request-id"),
        ]))
        .max_age(PREFLIGHT_MAX_AGE)
}

/// hyper's path (`S`) behind the origin check and the CORS layer.
#[derive(Clone)]
pub struct BrowserEdge<S> {
    inner: Cors<S>,
    refuse: Refusal,
}

impl<S> BrowserEdge<S> {
    /// `refuse` answers a request whose origin is not listed (403), `None` otherwise.
    pub(super) fn new(service: S, cors: &CorsLayer, refuse: Refusal) -> Self {
        BrowserEdge {
            inner: tower::Layer::layer(cors, service),
            refuse,
        }
    }
}

impl<S> hyper::service::Service<Request> for BrowserEdge<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: Request) -> Self::Future {
        if let Some(refused) = (self.refuse)(&request) {
            return Box::pin(std::future::ready(Ok(refused)));
        }
        let mut inner = self.inner.clone();
        Box::pin(async move { tower::Service::call(&mut inner, request).await })
    }
}
