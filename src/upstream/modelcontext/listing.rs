//! Its listings: each kind drained across pages (bounded in pages,
//! definitions and bytes), resources read into their contents and prompts
//! fetched, a few at a time, each within its own deadline.

use super::*;

/// Pages of one listing followed before the rest is left out.
const MAX_PAGES: usize = 100;
/// Definitions of one kind taken from one upstream.
const MAX_DEFINITIONS: usize = 10_000;
/// Resource reads and prompt fetches in flight at once, per upstream.
const READS_AT_ONCE: usize = 4;
/// The longest text of one resource carried into a listing.
const MAX_RESOURCE_TEXT: usize = 1 << 20;
/// The longest a resource read or prompt fetch may take, whatever the call timeout.
const MAX_READ_TIME: Duration = Duration::from_secs(10);

/// Bytes of resource texts (or prompt messages) one listing may still
/// carry: the listing's bound, spent as reads come back; once it is spent,
/// nothing more is read.
struct Budget {
    bound: usize,
    left: std::sync::atomic::AtomicUsize,
}

impl Budget {
    fn new(bound: usize) -> Self {
        Budget {
            bound,
            left: std::sync::atomic::AtomicUsize::new(bound),
        }
    }

    fn spent(&self) -> bool {
        self.left.load(Ordering::Acquire) == 0
    }

    /// Spends `n` bytes; false (and nothing left) when there were not as many.
    fn spend(&self, n: usize) -> bool {
        let taken = self
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(n)
            });
        if taken.is_err() {
            self.left.store(0, Ordering::Release);
        }
        taken.is_ok()
    }

    fn left_out(&self, key: &str) -> LeftOut {
        LeftOut {
            key: Some(key.to_owned()),
            reason: Unmapped::OverLimit,
            detail: format!(
                "the listing's texts are over the {}-byte bound (gateway.limits.max_listing_bytes)",
                self.bound
            ),
        }
    }
}

impl State {
    /// Every page of a listing, up to the bounds (pages, definitions, and
    /// bytes: see `protocol::bounds`); what is past them is said in the second part.
    async fn drain(
        &self,
        up: &Upstream,
        link: &dyn Transport,
        op: Op,
        field: &str,
    ) -> Result<(Vec<Value>, Vec<LeftOut>), CallError> {
        let over = |key: Option<String>, detail: String| LeftOut {
            key,
            reason: Unmapped::OverLimit,
            detail,
        };
        let mut taker = Taker::new(up.bounds);
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        let mut left = Vec::new();
        for _ in 0..MAX_PAGES {
            let answer = ask(
                up,
                link,
                op,
                &mc::page_params(cursor.as_deref()),
                up.timeout(),
            )
            .await?;
            let page = mc::read_page(field, answer.get()).map_err(CallError::protocol)?;
            if let Some(ttl) = page.ttl_ms {
                up.listing_kept_for(std::time::Duration::from_millis(ttl));
            }
            items.extend(
                taker
                    .take(page.items)
                    .into_iter()
                    .filter_map(|raw| serde_json::from_str::<Value>(raw.get()).ok()),
            );
            left.extend(taker.left.drain(..).map(|o| over(o.id, o.why)));
            if items.len() > MAX_DEFINITIONS {
                items.truncate(MAX_DEFINITIONS);
                left.push(over(
                    None,
                    format!("more than {MAX_DEFINITIONS} definitions; the rest is left out"),
                ));
                return Ok((items, left));
            }
            match page.next {
                Some(next) if !taker.full => cursor = Some(next),
                _ => return Ok((items, left)),
            }
        }
        left.push(over(
            None,
            format!("more than {MAX_PAGES} pages; the rest is left out"),
        ));
        Ok((items, left))
    }

    /// One kind's listing as the gateway's catalog takes it; `None` when the
    /// listing itself failed (the previous one is kept).
    pub(in crate::upstream) async fn list(
        &self,
        up: &Upstream,
        link: &dyn Transport,
        kind: Kind,
    ) -> Option<catalog::Built> {
        let field = mc::list_method(kind).1;
        let (items, mut left) = match self.drain(up, link, Op::List(kind), field).await {
            Ok(drained) => drained,
            Err(e) => {
                tracing::warn!(upstream = %up.name, kind = kind.as_str(), error = %e, "listing failed; keeping the previous one");
                return None;
            }
        };
        let mut candidates = Vec::new();
        let objects = items.into_iter().filter_map(|item| match item {
            Value::Object(def) => Some(def),
            _ => None,
        });
        match kind {
            Kind::Tool => {
                for def in objects {
                    match mc::tool(&def) {
                        Ok(tool) => candidates.push(Candidate {
                            definition: Value::Object(tool.definition),
                            source: Some(Value::Object(def)),
                            route: Route::ByName {
                                name: tool.name,
                                structured: tool.structured,
                            },
                        }),
                        Err(l) => left.push(l),
                    }
                }
            }
            Kind::Resource => {
                self.resources(up, link, objects.collect(), &mut candidates, &mut left)
                    .await;
                match self
                    .drain(up, link, Op::ListTemplates, "resourceTemplates")
                    .await
                {
                    Ok((templates, over)) => {
                        *lock(&self.templates) = Arc::new(
                            templates
                                .iter()
                                .filter_map(Value::as_object)
                                .cloned()
                                .collect(),
                        );
                        left.extend(
                            templates
                                .iter()
                                .filter_map(Value::as_object)
                                .map(mc::template),
                        );
                        left.extend(over);
                    }
                    Err(e) => {
                        tracing::debug!(upstream = %up.name, error = %e, "no resource templates listed")
                    }
                }
            }
            Kind::Prompt => {
                let defs: Vec<_> = objects.collect();
                *lock(&self.prompts) = Arc::new(defs.clone());
                self.prompts(up, link, defs, &mut candidates, &mut left)
                    .await;
            }
        }
        let mut built = catalog::build_from(&up.gateway_id, &up.name, kind, candidates);
        let mut counts: HashMap<Unmapped, i64> = HashMap::new();
        for l in &left {
            *counts.entry(l.reason).or_default() += 1;
            built.dropped.push(Dropped {
                kind,
                id: l.key.as_deref().map(|k| mc::original_id(kind, k)),
                reason: format!("{} ({})", l.detail, l.reason.as_str()),
                // The official face offers templates and prompts as the
                // upstream listed them.
                v1_only: matches!(
                    l.reason,
                    Unmapped::Template
                        | Unmapped::RequiredArguments
                        | Unmapped::UnsupportedMessages
                ),
            });
        }
        for reason in Unmapped::ALL.into_iter().filter(|r| r.applies_to(kind)) {
            up.metrics()
                .definitions_unmapped
                .with_label_values(&[&up.name, kind.as_str(), reason.as_str()])
                .set(counts.get(&reason).copied().unwrap_or(0));
        }
        Some(built)
    }

    /// Each listed resource with its text: from the cache, or read now (a
    /// few at a time, each within its time limit and size cap).
    async fn resources(
        &self,
        up: &Upstream,
        link: &dyn Transport,
        defs: Vec<serde_json::Map<String, Value>>,
        candidates: &mut Vec<Candidate>,
        left: &mut Vec<LeftOut>,
    ) {
        let within = up.timeout().min(MAX_READ_TIME);
        // The texts carried into the listing take the listing's bound together.
        let budget = Budget::new(up.bounds.listing_bytes);
        let mut listed = Vec::new();
        for def in defs {
            match mc::resource_uri(&def) {
                Ok(uri) => {
                    let uri = uri.to_owned();
                    listed.push((def, uri));
                }
                Err(l) => left.push(l),
            }
        }
        let read = futures_util::stream::iter(listed)
            .map(|(def, uri)| {
                let budget = &budget;
                async move {
                    if budget.spent() {
                        let over = budget.left_out(&uri);
                        return (def, uri, Err(over));
                    }
                    let cached = lock(&self.resources).get(&uri).cloned();
                    let text = match cached {
                        Some(text) => text,
                        None => {
                            let params = mc::uri_params(&uri);
                            match ask(up, link, Op::ReadResource, &params, within).await {
                                Ok(answer) => {
                                    mc::read_resource_text(&uri, answer.get(), MAX_RESOURCE_TEXT)
                                }
                                Err(e) => Err(LeftOut {
                                    key: Some(uri.clone()),
                                    reason: Unmapped::ReadFailed,
                                    detail: format!("resources/read failed: {e}"),
                                }),
                            }
                        }
                    };
                    let text = match text {
                        Ok(t) if !budget.spend(t.text.len()) => Err(budget.left_out(&uri)),
                        other => other,
                    };
                    (def, uri, text)
                }
            })
            .buffered(READS_AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        let mut cache = HashMap::new();
        let mut to_subscribe = Vec::new();
        for (def, uri, text) in read {
            match &text {
                Ok(text) => candidates.push(Candidate::native(Value::Object(mc::resource(
                    &def, &uri, text,
                )))),
                Err(l) => left.push(l.clone()),
            }
            if !matches!(&text, Err(l) if matches!(l.reason, Unmapped::ReadFailed | Unmapped::OverLimit))
            {
                cache.insert(uri.clone(), text);
            }
            to_subscribe.push(uri);
        }
        // Only what is listed now stays cached.
        *lock(&self.resources) = cache;
        if self.subscribe.load(Ordering::Acquire) {
            let fresh: Vec<String> = {
                let mut subscribed = lock(&self.subscribed);
                to_subscribe
                    .into_iter()
                    .filter(|uri| subscribed.insert(uri.clone()))
                    .collect()
            };
            futures_util::stream::iter(fresh)
                .for_each_concurrent(READS_AT_ONCE, |uri| async move {
                    let params = mc::uri_params(&uri);
                    if let Err(e) = ask(up, link, Op::Subscribe, &params, within).await {
                        tracing::debug!(upstream = %up.name, uri, error = %e, "resources/subscribe failed");
                        lock(&self.subscribed).remove(&uri);
                    }
                })
                .await;
        }
    }

    /// Each listed prompt that takes no required arguments, fetched.
    async fn prompts(
        &self,
        up: &Upstream,
        link: &dyn Transport,
        defs: Vec<serde_json::Map<String, Value>>,
        candidates: &mut Vec<Candidate>,
        left: &mut Vec<LeftOut>,
    ) {
        let within = up.timeout().min(MAX_READ_TIME);
        let budget = Budget::new(up.bounds.listing_bytes);
        let mut fetchable = Vec::new();
        for def in defs {
            match mc::prompt_name(&def) {
                Ok(name) => {
                    let name = name.to_owned();
                    fetchable.push((def, name));
                }
                Err(l) => left.push(l),
            }
        }
        let fetched = futures_util::stream::iter(fetchable)
            .map(|(def, name)| {
                let budget = &budget;
                async move {
                    if budget.spent() {
                        return Err(budget.left_out(&name));
                    }
                    let params = mc::get_prompt_params(&name);
                    match ask(up, link, Op::GetPrompt, &params, within).await {
                        Ok(answer) if !budget.spend(answer.get().len()) => {
                            Err(budget.left_out(&name))
                        }
                        Ok(answer) => mc::prompt(&def, &name, answer.get()),
                        Err(e) => Err(LeftOut {
                            key: Some(name.clone()),
                            reason: Unmapped::ReadFailed,
                            detail: format!("prompts/get failed: {e}"),
                        }),
                    }
                }
            })
            .buffered(READS_AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        for prompt in fetched {
            match prompt {
                Ok(def) => candidates.push(Candidate::native(Value::Object(def))),
                Err(l) => left.push(l),
            }
        }
    }
}
