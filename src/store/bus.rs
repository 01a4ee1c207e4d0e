//! Change notifications between replicas. An upstream's notification that a
//! listing or a resource changed is heard by the replica whose connection
//! carried it; through the store's publish/subscribe channel every other
//! replica hears it too, relists that upstream and tells its own streams,
//! so each open stream is told once, on whichever replica holds it.
//!
//! An HTTP upstream is one server for all replicas, each subscribed to it:
//! the same notification may reach every replica. The first to hear it
//! claims it for a short while and speaks for all; the others stay quiet.
//! The claimer's own later notifications of the same thing are new changes
//! (one connection does not repeat itself) and are published again. A stdio
//! child is each replica's own, so what it says is always published.
//!
//! Without the store (down, or the relay's queue full) a replica acts on
//! what it heard alone, as without a store: nothing is lost, the other
//! replicas' streams miss that one change.

use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Store;

/// How long the first replica to hear a shared upstream's notification
/// speaks for the others.
const CLAIM_FOR: Duration = Duration::from_millis(1000);
/// What the relay's queue holds before upstreams act on their own.
pub const RELAY_QUEUE: usize = 1024;
/// How often the subscribed connection is pinged (a dead one is replaced).
const PING_EVERY: Duration = Duration::from_secs(2);

/// Claims the notification for this replica (or finds it already claimed by
/// this one) and publishes it; 1 when published, 0 when another replica
/// claimed it.
const CLAIM_AND_PUBLISH: &str = r"
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
";

/// A change notification an upstream sent, for the other replicas to hear.
#[derive(Debug, Clone)]
pub struct Heard {
    pub upstream: std::sync::Arc<str>,
    /// The original id of the resource that changed; `None`: a listing changed.
    pub changed: Option<String>,
    /// Every replica talks to this same server (an HTTP upstream), so each may
    /// hear the same notification; a stdio child is each replica's own.
    pub shared: bool,
    /// The tenant whose child (or HTTP session) said a resource changed:
    /// the change is that tenant's alone, and no listing is made again.
    pub tenant: Option<std::sync::Arc<str>>,
}

/// This replica, as the bus acts on it (the composition root provides it:
/// the dispatcher's upstreams and the edge's calls sit above the store).
pub trait Here: Clone + Send + Sync + 'static {
    /// Relists `upstream` soon and then announces `changed` (a resource's
    /// original id) or the listing; nothing when this replica does not run
    /// that upstream (a rollout between two configurations).
    fn relist_soon(&self, upstream: &str, changed: Option<&str>);
    /// Announces to `tenant`'s streams that the resource `changed` (its
    /// original id) of `upstream` changed in that tenant's own child.
    fn changed_for(&self, tenant: &str, upstream: &str, changed: &str);
    /// Relists every upstream whose pinned tools were quarantined because
    /// the store could not be asked.
    fn recheck_pins(&self);
    /// Cancels the call `id` (JSON text) of the handshake-era session
    /// whose nonce is `session`, if it runs here.
    fn cancel_call(&self, session: &[u8], id: &str);
    /// Hands a client's answer (a result or an error object, as JSON text)
    /// to the request `id` of an upstream's sent in `session`, if it waits here.
    fn answer_ask(&self, session: &[u8], id: &str, outcome: Result<&str, &str>);
    /// Continues the call held here under `round.held`, if it is, for the
    /// replica `origin`, which waits for what becomes of it.
    fn continue_round(&self, origin: &str, round: RoundAsked);
    /// What became of a round this replica asked another to continue
    /// (`news`: JSON text), for the request waiting under `waiter`.
    fn round_news(&self, waiter: &str, news: &str);
    /// A task of `tenant`'s changed status (`status`: the notification's
    /// params, its id the tenant's), for this replica's streams of it.
    fn task_status(&self, tenant: &str, status: &str);
    /// Another replica's request about a task created here (or, for
    /// `tasks/list`, about every task of the tenant's created here), for
    /// the replica `origin`, which waits for the answer.
    fn task_asked(&self, origin: &str, asked: TaskAsked);
}

/// A request about a task, asked of the replica whose session with the
/// upstream holds it; the answer comes back as news for `waiter`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskAsked {
    #[serde(rename = "t")]
    pub tenant: String,
    /// `tasks/get`, `tasks/result`, `tasks/cancel` or `tasks/list`.
    #[serde(rename = "m")]
    pub method: String,
    /// The task's id as the tenant holds it (empty for `tasks/list`).
    #[serde(rename = "i")]
    pub task: String,
    /// The replica asked (empty: every replica, for `tasks/list`).
    #[serde(rename = "r")]
    pub to: String,
    #[serde(rename = "w")]
    pub waiter: String,
    /// For a poll of a task's input: what the polling client declared it
    /// can be asked (elicitation, sampling, roots).
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<[bool; 3]>,
    /// For `tasks/update`: the client's `inputResponses`, as JSON text.
    #[serde(rename = "p", default, skip_serializing_if = "Option::is_none")]
    pub responses: Option<String>,
}

/// A 2026-07-28 client's retry of a round whose call another replica holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoundAsked {
    /// The held call's id (from the sealed state).
    #[serde(rename = "h")]
    pub held: String,
    #[serde(rename = "t")]
    pub tenant: String,
    /// The client's `inputResponses`, as JSON text ("" when it sent none).
    #[serde(rename = "i")]
    pub responses: String,
    /// What the client declared it can be asked: elicitation, sampling, roots.
    #[serde(rename = "d")]
    pub declared: [bool; 3],
    /// Where the asking replica waits for the news.
    #[serde(rename = "w")]
    pub waiter: String,
}

/// One notification on the channel.
#[derive(Serialize, Deserialize)]
struct Message {
    /// The replica that heard it.
    #[serde(rename = "o")]
    origin: String,
    #[serde(rename = "u")]
    upstream: String,
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    changed: Option<String>,
    /// The tenant a change is for alone (see [`Heard::tenant`]).
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    tenant: Option<String>,
    /// A client's cancellation of its call: the session and the request id
    /// (`upstream` is empty).
    #[serde(rename = "x", default, skip_serializing_if = "Option::is_none")]
    cancel: Option<(String, String)>,
    /// A client's answer to a request an upstream sent it: the session,
    /// the request's id, whether it is an error, and the result or error
    /// object as JSON text (`upstream` is empty).
    #[serde(rename = "a", default, skip_serializing_if = "Option::is_none")]
    answer: Option<(String, String, bool, String)>,
    /// A retry of a round whose call another replica holds (`upstream` is empty).
    #[serde(rename = "r", default, skip_serializing_if = "Option::is_none")]
    round: Option<RoundAsked>,
    /// News of such a round for the replica that asked: that replica, its
    /// waiter, and the news as JSON text (`upstream` is empty).
    #[serde(rename = "n", default, skip_serializing_if = "Option::is_none")]
    news: Option<(String, String, String)>,
    /// A task's status for a tenant's streams: the tenant and the
    /// notification's params as JSON text (`upstream` is empty).
    #[serde(rename = "k", default, skip_serializing_if = "Option::is_none")]
    task_status: Option<(String, String)>,
    /// A request about a task for the replica that created it (`upstream` is empty).
    #[serde(rename = "q", default, skip_serializing_if = "Option::is_none")]
    task_asked: Option<TaskAsked>,
}

impl Message {
    fn of(origin: &str) -> Self {
        Message {
            origin: origin.to_owned(),
            upstream: String::new(),
            changed: None,
            tenant: None,
            cancel: None,
            answer: None,
            round: None,
            news: None,
            task_status: None,
            task_asked: None,
        }
    }
}

impl Store {
    fn channel(&self) -> String {
        self.key(&["changes"])
    }

    /// Publishes what this replica heard; whether this replica should act on
    /// it (false: another replica heard the same and speaks for it).
    async fn publish(&self, heard: &Heard) -> Result<bool, super::StoreError> {
        let message = serde_json::to_string(&Message {
            upstream: heard.upstream.to_string(),
            changed: heard.changed.clone(),
            tenant: heard.tenant.as_deref().map(str::to_owned),
            ..Message::of(self.replica_id())
        })
        .unwrap_or_default();
        if !heard.shared {
            let _: i64 = self
                .query(redis::cmd("PUBLISH").arg(self.channel()).arg(message))
                .await?;
            return Ok(true);
        }
        let claim = match &heard.changed {
            Some(id) => self.key(&["heard", "resource", &heard.upstream, id]),
            None => self.key(&["heard", "listing", &heard.upstream]),
        };
        static SCRIPT: std::sync::LazyLock<redis::Script> =
            std::sync::LazyLock::new(|| redis::Script::new(CLAIM_AND_PUBLISH));
        let published: i64 = self
            .script(
                &SCRIPT,
                &[&claim],
                &[
                    self.replica_id().to_owned(),
                    CLAIM_FOR.as_millis().to_string(),
                    self.channel(),
                    message,
                ],
            )
            .await?;
        Ok(published == 1)
    }

    /// Tells every replica to relist `upstream` (its pins were approved).
    pub async fn announce_relisting(&self, upstream: &str) -> Result<(), super::StoreError> {
        self.announce(Message {
            upstream: upstream.to_owned(),
            ..Message::of(self.replica_id())
        })
        .await
    }

    /// Tells every replica that a client cancelled its call `id` (JSON
    /// text) of the session whose nonce is `session`: the one running it ends it.
    pub async fn announce_cancel(&self, session: &[u8], id: &str) -> Result<(), super::StoreError> {
        self.announce(Message {
            cancel: Some((String::from_utf8_lossy(session).into_owned(), id.to_owned())),
            ..Message::of(self.replica_id())
        })
        .await
    }

    /// Tells every replica a client's answer to the request `id` (JSON
    /// text) of an upstream's sent in `session`: the replica where that
    /// request waits takes it.
    pub async fn announce_answer(
        &self,
        session: &[u8],
        id: &str,
        outcome: Result<&str, &str>,
    ) -> Result<(), super::StoreError> {
        let (error, text) = match outcome {
            Ok(result) => (false, result),
            Err(error) => (true, error),
        };
        self.announce(Message {
            answer: Some((
                String::from_utf8_lossy(session).into_owned(),
                id.to_owned(),
                error,
                text.to_owned(),
            )),
            ..Message::of(self.replica_id())
        })
        .await
    }

    /// Asks the replica that holds a round's call to continue it.
    pub async fn announce_round(&self, round: RoundAsked) -> Result<(), super::StoreError> {
        self.announce(Message {
            round: Some(round),
            ..Message::of(self.replica_id())
        })
        .await
    }

    /// Tells the replica `to` what became of the round its `waiter` asked for.
    pub async fn announce_round_news(
        &self,
        to: &str,
        waiter: &str,
        news: &str,
    ) -> Result<(), super::StoreError> {
        self.announce(Message {
            news: Some((to.to_owned(), waiter.to_owned(), news.to_owned())),
            ..Message::of(self.replica_id())
        })
        .await
    }

    /// Tells the other replicas' streams of `tenant` that one of its tasks
    /// changed status (the upstream told this replica, whose session with
    /// it holds the task).
    pub async fn announce_task_status(
        &self,
        tenant: &str,
        status: &str,
    ) -> Result<(), super::StoreError> {
        self.announce(Message {
            task_status: Some((tenant.to_owned(), status.to_owned())),
            ..Message::of(self.replica_id())
        })
        .await
    }

    /// Asks the replica that created a task (or, for `tasks/list`, every
    /// replica) about it.
    pub async fn announce_task_asked(&self, asked: TaskAsked) -> Result<(), super::StoreError> {
        self.announce(Message {
            task_asked: Some(asked),
            ..Message::of(self.replica_id())
        })
        .await
    }

    /// Publishes `message` on the change channel for every replica (this
    /// one ignores its own).
    async fn announce(&self, message: Message) -> Result<(), super::StoreError> {
        let message = serde_json::to_string(&message).unwrap_or_default();
        let _: i64 = self
            .query(redis::cmd("PUBLISH").arg(self.channel()).arg(message))
            .await?;
        Ok(())
    }

    /// Takes what upstreams heard, publishes it and acts on it here, until
    /// `stop` (or the queue's senders are gone).
    pub async fn relay(
        self,
        mut heard: mpsc::Receiver<Heard>,
        here: impl Here,
        stop: CancellationToken,
    ) {
        loop {
            let h = tokio::select! {
                h = heard.recv() => match h {
                    Some(h) => h,
                    None => return,
                },
                () = stop.cancelled() => return,
            };
            let act = match self.publish(&h).await {
                Ok(act) => act,
                Err(e) => {
                    tracing::debug!(upstream = %h.upstream, error = %e, "change not shared with the other replicas");
                    true
                }
            };
            match (act, &h.tenant, &h.changed) {
                (false, _, _) => {}
                (true, Some(tenant), Some(changed)) => {
                    here.changed_for(tenant, &h.upstream, changed)
                }
                (true, _, changed) => here.relist_soon(&h.upstream, changed.as_deref()),
            }
        }
    }

    /// Hears what the other replicas' upstreams said, until `stop`: each
    /// upstream named is relisted here and the change told to this
    /// replica's streams. The subscription is made again, with backoff,
    /// whenever its connection is lost.
    pub async fn listen(self, here: impl Here, stop: CancellationToken) {
        // Pinned tools quarantined because the store could not be asked are
        // checked again as soon as it answers.
        let mut up = self.watch_up();
        let (recheck, stop_recheck) = (here.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    changed = up.changed() => if changed.is_err() { return },
                    () = stop_recheck.cancelled() => return,
                }
                if *up.borrow_and_update() {
                    recheck.recheck_pins();
                }
            }
        });
        let mut wait = Duration::from_millis(100);
        loop {
            let heard = tokio::select! {
                heard = self.listen_once(&here) => heard,
                () = stop.cancelled() => return,
            };
            if heard {
                wait = Duration::from_millis(100);
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = stop.cancelled() => return,
            }
            wait = (wait * 2).min(Duration::from_secs(5));
        }
    }

    /// One subscribed connection, until it is lost; whether it was made.
    async fn listen_once(&self, here: &impl Here) -> bool {
        let deadline = self.settings().timeout.max(Duration::from_millis(500));
        let subscribed = async {
            let mut pubsub = self.0.client.get_async_pubsub().await?;
            pubsub.subscribe(self.channel()).await?;
            redis::RedisResult::Ok(pubsub)
        };
        let Ok(Ok(pubsub)) = tokio::time::timeout(deadline, subscribed).await else {
            return false;
        };
        let (mut sink, mut messages) = pubsub.split();
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        loop {
            tokio::select! {
                m = messages.next() => {
                    let Some(m) = m else { return true };
                    self.act_on(m.get_payload_bytes(), here);
                }
                _ = ping.tick() => {
                    let pong = tokio::time::timeout(deadline, sink.ping::<redis::Value>()).await;
                    if !matches!(pong, Ok(Ok(_))) {
                        return true;
                    }
                }
            }
        }
    }

    fn act_on(&self, payload: &[u8], here: &impl Here) {
        let Ok(m) = serde_json::from_slice::<Message>(payload) else {
            tracing::debug!("unreadable message on the store's change channel");
            return;
        };
        if m.origin == self.replica_id() {
            return;
        }
        if let Some(round) = m.round {
            here.continue_round(&m.origin, round);
            return;
        }
        if let Some((to, waiter, news)) = &m.news {
            if to == self.replica_id() {
                here.round_news(waiter, news);
            }
            return;
        }
        if let Some((tenant, status)) = &m.task_status {
            here.task_status(tenant, status);
            return;
        }
        if let Some(asked) = m.task_asked {
            if asked.to.is_empty() || asked.to == self.replica_id() {
                here.task_asked(&m.origin, asked);
            }
            return;
        }
        match (&m.cancel, &m.answer) {
            (Some((session, id)), _) => here.cancel_call(session.as_bytes(), id),
            (None, Some((session, id, error, text))) => {
                let outcome = if *error { Err(&**text) } else { Ok(&**text) };
                here.answer_ask(session.as_bytes(), id, outcome);
            }
            (None, None) => match (&m.tenant, &m.changed) {
                (Some(tenant), Some(changed)) => here.changed_for(tenant, &m.upstream, changed),
                _ => here.relist_soon(&m.upstream, m.changed.as_deref()),
            },
        }
    }
}

/// A relay's queue for upstreams, and its receiving end for [`Store::relay`].
pub fn relay_queue() -> (mpsc::Sender<Heard>, mpsc::Receiver<Heard>) {
    mpsc::channel(RELAY_QUEUE)
}
