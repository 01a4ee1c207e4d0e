//! A body, read as it arrives, up to the limit: a first message that is
//! `initialize` starts a session at once; anything else is answered once
//! whole (a large one on the blocking pool).

use super::*;

/// Reads the body as it arrives. A first message that is `initialize` starts a
/// session at once (the client may wait for its answer before sending more);
/// otherwise the whole body is read, up to the limit, and then answered.
pub(super) async fn read_body(
    s: &AgentState,
    tenant: Arc<Tenant>,
    credential: Option<Credential>,
    body: Body,
    headers: &HeaderMap,
) -> Response {
    let mut body = body.into_data_stream();
    let mut buf = BytesMut::new();
    let mut first = FirstLook::default();
    // A request with the Model Context Protocol's headers opens no MCP v1.0 session.
    first.decided = mirrored(headers).say_modelcontext();
    // The whole body must arrive within the deadline, unless it opens a session.
    let deadline = tokio::time::Instant::now() + s.body_read_timeout;
    loop {
        // What has arrived already is taken at once. A body that arrives whole
        // is never peeked at here: `exchange` parses it once.
        let next = match body.next().now_or_never() {
            Some(next) => next,
            None => {
                // The client is still sending: an `initialize` first starts a
                // session now, as its client may wait for the answer.
                match first.look(&buf) {
                    Some(First::Initialize) => {
                        let opening = session::Opening {
                            tenant,
                            credential,
                            buf,
                            body,
                        };
                        return session::start(
                            s.dispatcher.clone(),
                            &s.sessions,
                            opening,
                            s.max_body_bytes,
                        )
                        .await;
                    }
                    Some(First::Invalid) => return Refusal::ParseError.reply().into_response(),
                    _ => {}
                }
                match tokio::time::timeout_at(deadline, body.next()).await {
                    Ok(next) => next,
                    Err(_) => return Refusal::BodyTimeout.reply().into_response(),
                }
            }
        };
        let Some(chunk) = next else { break };
        let Ok(chunk) = chunk else {
            return Refusal::UnreadableBody.reply().into_response();
        };
        if buf.len() + chunk.len() > s.max_body_bytes {
            return Refusal::TooLarge(s.max_body_bytes).reply().into_response();
        }
        buf.extend_from_slice(&chunk);
    }
    if buf.len() > LARGE_BODY {
        return match exchange_aside(s, tenant.clone(), credential, buf, first.decided, headers)
            .await
        {
            Ok(response) => response,
            Err(body) => streamed(s, tenant, body, headers.clone()).await,
        };
    }
    match exchange(s, &tenant, &buf, first.decided, mirrored(headers), None).await {
        Exchange::Reply(reply) => reply.into_response(),
        Exchange::Streamed => streamed(s, tenant, buf.freeze(), headers.clone()).await,
        Exchange::Session => session_of(s, tenant, credential, buf).await,
        Exchange::Listen(id, filter) => {
            let holder = credential.map(|c| crate::http::listen::Holder::new(c, &tenant));
            crate::http::listen::stream(s, &tenant, holder, id, filter).await
        }
    }
}
