//! The documents anyone may read on the agent listener: the public keys of
//! what the gateway signs (`/.well-known/jwks.json`) and its protected
//! resource metadata (RFC 9728), each cacheable for five minutes.

use super::*;

/// Where the gateway publishes the public keys of what it signs.
pub(super) const JWKS_PATH: &str = "/.well-known/jwks.json";

impl Edge {
    /// `GET /.well-known/jwks.json`: the public keys of the JWTs the gateway
    /// signs (identity assertions, actor tokens), unauthenticated, for the
    /// upstreams and authorization servers that verify them; 404 when it
    /// signs nothing.
    pub(super) fn jwks(&self, method: &axum::http::Method) -> Response {
        let keys = self.keys.load();
        let Some(document) = keys.jwks() else {
            return Refusal::NotFound.reply().into_response();
        };
        if method != axum::http::Method::GET {
            return Refusal::MetadataByGet.reply().into_response();
        }
        self.count(StatusCode::OK);
        public_document(document.clone())
    }

    /// `GET` of this gateway's protected resource metadata (RFC 9728), when
    /// `gateway.auth.resource` is set; `None` for any other request.
    pub(super) fn resource_metadata<B>(&self, request: &hyper::Request<B>) -> Option<Response> {
        let keys = self.keys.load();
        let resource = keys.resource()?;
        if !resource.paths.iter().any(|p| p == request.uri().path()) {
            return None;
        }
        if request.method() != axum::http::Method::GET {
            return Some(Refusal::MetadataByGet.reply().into_response());
        }
        self.count(StatusCode::OK);
        Some(public_document(resource.document.clone()))
    }
}

/// A JSON document anyone may read, which a reader may keep five minutes.
pub(super) fn public_document(document: impl Into<Body>) -> Response {
    let mut response = Response::new(document.into());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=300"),
    );
    response
}
