//! The console's script and style sheet, compiled into the binary.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const SCRIPT: &str = include_str!("console.js");
const STYLE: &str = include_str!("console.css");

fn asset(body: &'static str, kind: &'static str) -> Response {
    let mut r = body.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    r
}

pub(super) async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

pub(super) async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}
