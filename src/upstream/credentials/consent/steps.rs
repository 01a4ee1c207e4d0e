//! The consent's later steps (see `flow` for the whole): `login`, where
//! the identity provider says who the browser's user is and the upstream's
//! authorization server is sent the browser; the gateway's client there
//! (configured, or registered once per issuer); and `callback`, where the
//! code is redeemed once and the tokens kept.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::Deserialize;

use super::flow::{
    Answer, Flow, Leg, Returned, digest, page, random, server_failed, unavailable, with_query,
};
use super::server::{self, AuthServer, Client};
use super::{Consents, connection_aad, connection_key, connection_of, now_s, seal};
use crate::upstream::credentials::token::{Refusal, TokenAnswer};

impl Consents {
    /// Step 2: `GET login?code&state[&iss]`, from the identity provider.
    pub async fn login(&self, r: &Returned, cookie: Option<&str>) -> Answer {
        let (id, mut flow, leg) = match self.returning("login", r, cookie).await {
            Ok(found) => found,
            Err(answer) => return answer,
        };
        let (Some(code), None) = (&r.code, &r.error) else {
            self.end_flow(&id).await;
            return page(
                403,
                "Not signed in",
                "Your identity provider did not sign you in.",
            );
        };
        let redirect = self.redirect("login");
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", &*redirect),
            ("code_verifier", &*leg.verifier),
        ];
        let answer = match self
            .token_request(
                &flow.upstream,
                "authorization_code",
                &leg.server,
                &leg.client,
                &form,
            )
            .await
        {
            Ok(a) => a,
            Err(r) => {
                self.end_flow(&id).await;
                return server_failed("your identity provider", &r);
            }
        };
        if !self.names_the_user(&answer, &flow, &leg) {
            self.end_flow(&id).await;
            self.audit(
                &flow.tenant,
                &flow.subject,
                &flow.upstream,
                "login",
                "another_user",
            );
            return page(
                403,
                "Another user",
                "You signed in as another user than the one whose agent asked. Nothing was connected.",
            );
        }
        match self.upstream_leg(&id, &mut flow).await {
            Ok(location) => Answer::Redirect {
                location,
                cookie: None,
            },
            Err(answer) => {
                self.end_flow(&id).await;
                answer
            }
        }
    }

    /// Whether the ID token of `answer` is the flow's user's, issued now
    /// for the gateway's login client, with the flow's nonce.
    fn names_the_user(&self, answer: &TokenAnswer, flow: &Flow, leg: &Leg) -> bool {
        #[derive(Deserialize)]
        struct Claims {
            iss: String,
            sub: String,
            aud: serde_json::Value,
            nonce: Option<String>,
            exp: u64,
        }
        let claims = answer
            .id_token
            .as_deref()
            .and_then(|t| t.split('.').nth(1))
            .and_then(|p| B64.decode(p.trim_end_matches('=')).ok())
            .and_then(|bytes| serde_json::from_slice::<Claims>(&bytes).ok());
        let Some(c) = claims else {
            return false;
        };
        let client_id = &leg.client.client_id;
        let audience = match &c.aud {
            serde_json::Value::String(a) => a == client_id,
            serde_json::Value::Array(all) => all.iter().any(|a| a.as_str() == Some(client_id)),
            _ => false,
        };
        c.iss == flow.issuer
            && c.sub == flow.subject
            && audience
            && c.nonce.is_some()
            && c.nonce == leg.nonce
            && c.exp > now_s()
    }

    /// The upstream's authorization server's step: its URL, the flow kept.
    async fn upstream_leg(&self, id: &str, flow: &mut Flow) -> Result<String, Answer> {
        let upstream = flow.upstream.clone();
        let consent = self
            .upstreams
            .get(&*upstream)
            .map(|c| c.clone())
            .ok_or_else(|| {
                page(
                    400,
                    "Unknown upstream",
                    "This upstream no longer asks for consent.",
                )
            })?;
        let server = self
            .server_of(&upstream)
            .await
            .map_err(|r| server_failed("the upstream's authorization server", &r))?;
        let client = self
            .client_at(&upstream, &server, consent.client.as_ref())
            .await
            .map_err(|r| server_failed("the upstream's authorization server", &r))?;
        let (Some(v1), Some(v2)) = (random(), random()) else {
            return Err(unavailable());
        };
        let verifier = v1 + &v2;
        let mut query = vec![
            ("response_type", "code".to_owned()),
            ("client_id", client.client_id.clone()),
            ("redirect_uri", self.redirect("callback")),
            ("code_challenge", digest(&verifier)),
            ("code_challenge_method", "S256".to_owned()),
        ];
        if let Some(scope) = &consent.scope {
            query.push(("scope", scope.clone()));
        }
        if let Some(resource) = &consent.resource {
            query.push(("resource", resource.clone()));
        }
        let location = server.authorization_endpoint.clone();
        flow.leg = Some(Leg {
            verifier,
            nonce: None,
            server,
            client,
        });
        let state = self
            .new_state("consent", id, flow)
            .await
            .map_err(|_| unavailable())?;
        self.put_flow(id, flow).await.map_err(|_| unavailable())?;
        let query: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Ok(with_query(&location, &query, &state))
    }

    /// The gateway's client at `server`: configured, else registered once
    /// per issuer (RFC 7591) and kept like tokens.
    async fn client_at(
        &self,
        upstream: &str,
        server: &AuthServer,
        configured: Option<&crate::config::consent::ConsentClient>,
    ) -> Result<Client, Refusal> {
        if let Some(c) = configured {
            return Ok(Client {
                client_id: c.client_id.clone(),
                client_secret: c.client_secret.clone(),
                basic: c.basic,
            });
        }
        let redirect = self.redirect("callback");
        let key = format!("reg:{}", digest(&format!("{}\n{redirect}", server.issuer)));
        let aad = format!("reg\n{}", server.issuer);
        let kept = self.keep.get(&key).await.map_err(|_| super::store_down())?;
        if let Some(client) = kept
            .and_then(|s| seal::open(&self.settings.keys, &aad, &s))
            .and_then(|plain| serde_json::from_slice::<Client>(&plain).ok())
        {
            return Ok(client);
        }
        let started = std::time::Instant::now();
        let registered = server::register(&self.http, server, &redirect, self.timeout).await;
        self.count_request(upstream, "registration", registered.as_ref().err(), started);
        let client = registered?;
        let sealed = serde_json::to_vec(&client)
            .ok()
            .and_then(|plain| seal::seal(&self.settings.keys, &aad, &plain))
            .ok_or_else(|| Refusal::invalid("a registration cannot be sealed"))?;
        self.keep
            .put(&key, &sealed, None)
            .await
            .map_err(|_| super::store_down())?;
        Ok(client)
    }

    /// Step 3: `GET callback?code&state[&iss]`, from the upstream's server.
    pub async fn callback(&self, r: &Returned, cookie: Option<&str>) -> Answer {
        let (id, flow, leg) = match self.returning("consent", r, cookie).await {
            Ok(found) => found,
            Err(answer) => return answer,
        };
        self.end_flow(&id).await;
        let (tenant, subject, upstream) = (&flow.tenant, &flow.subject, &flow.upstream);
        let (Some(code), None) = (&r.code, &r.error) else {
            self.counted(upstream, "refused");
            self.audit(tenant, subject, upstream, "consent", "refused");
            return page(
                403,
                "Not connected",
                "The upstream's authorization server did not grant access. Nothing was connected.",
            );
        };
        let redirect = self.redirect("callback");
        let resource = self
            .upstreams
            .get(&**upstream)
            .and_then(|c| c.resource.clone());
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", &*redirect),
            ("code_verifier", &*leg.verifier),
        ];
        if let Some(resource) = &resource {
            form.push(("resource", resource));
        }
        let answer = match self
            .token_request(
                upstream,
                "authorization_code",
                &leg.server,
                &leg.client,
                &form,
            )
            .await
        {
            Ok(a) => a,
            Err(r) => {
                self.counted(upstream, "refused");
                self.audit(tenant, subject, upstream, "consent", r.reason);
                return server_failed("the upstream's authorization server", &r);
            }
        };
        let mut connection = connection_of(
            answer.access_token.unwrap_or_default(),
            answer.expires_in,
            leg.server,
            leg.client,
            resource,
            answer.scope,
        );
        connection.refresh_token = answer.refresh_token;
        let key = connection_key(tenant, &flow.issuer, subject, upstream);
        let aad = connection_aad(tenant, &flow.issuer, subject, upstream);
        if self
            .write_connection(&key, &aad, &connection)
            .await
            .is_err()
        {
            return unavailable();
        }
        self.counted(upstream, "connected");
        self.audit(tenant, subject, upstream, "consent", "connected");
        page(
            200,
            "Connected",
            format!(
                "Your account is connected to {upstream}. You can close this page and return to your agent."
            ),
        )
    }
}
