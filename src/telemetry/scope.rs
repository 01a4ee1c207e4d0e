//! A request's place in the log without a `tracing` span ([`Scope`]), and
//! the formatter that splices it into every line written while it is current.

use super::*;

/// A request's place in the log where no `tracing` span is made for it: the
/// JSON object its `request` span would show (`request_id`, `tenant`,
/// `name`), written once per request. Every JSON line written while it is
/// current on a thread ([`Scope::run`]) carries it as that span would be
/// carried: the outermost in `spans`, and `span` unless a span is entered
/// inside it.
#[derive(Default)]
pub struct Scope {
    object: String,
}

thread_local! {
    /// The current [`Scope`]'s object; empty outside any.
    static CURRENT: Cell<String> = const { Cell::new(String::new()) };
    /// Spans entered and not yet exited on this thread ([`Entered`]).
    pub(super) static ENTERED: Cell<u32> = const { Cell::new(0) };
}

impl Scope {
    /// Makes this the scope of the request `request_id` of `tenant`: the
    /// fields of `tracing::info_span!("request", request_id, tenant)`.
    pub fn set(&mut self, request_id: &str, tenant: Option<&str>) {
        let out = &mut self.object;
        out.clear();
        out.push_str("{\"request_id\":");
        string(out, request_id);
        if let Some(tenant) = tenant {
            out.push_str(",\"tenant\":");
            string(out, tenant);
        }
        out.push_str(",\"name\":\"request\"}");
    }

    /// Runs `f` (a poll of the request's future) with this scope current on
    /// this thread, and the one before it current again afterwards.
    pub fn run<R>(&mut self, f: impl FnOnce() -> R) -> R {
        struct Restore<'a> {
            to: &'a mut String,
            before: String,
        }
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                *self.to = CURRENT.replace(std::mem::take(&mut self.before));
            }
        }
        let before = CURRENT.replace(std::mem::take(&mut self.object));
        let _restore = Restore {
            to: &mut self.object,
            before,
        };
        f()
    }

    /// Calls `f` with the current scope's object, if there is one.
    pub(super) fn with_current<R>(f: impl FnOnce(Option<&str>) -> R) -> R {
        let object = CURRENT.take();
        let r = f(Some(object.as_str()).filter(|o| !o.is_empty()));
        CURRENT.set(object);
        r
    }
}

/// Counts the spans entered on each thread, so that a line written outside
/// every span need not look for one in the registry.
pub(super) struct Entered;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Entered {
    fn on_enter(&self, _: &tracing::span::Id, _: tracing_subscriber::layer::Context<'_, S>) {
        ENTERED.set(ENTERED.get() + 1);
    }

    fn on_exit(&self, _: &tracing::span::Id, _: tracing_subscriber::layer::Context<'_, S>) {
        ENTERED.set(ENTERED.get().saturating_sub(1));
    }
}

/// The JSON event format, with the current [`Scope`] among the line's spans.
pub(super) struct InScope<F>(pub(super) F);

impl<S, N, F> FormatEvent<S, N> for InScope<F>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        // A line written while a recording span is current names it.
        let ids = super::traces::ids();
        Scope::with_current(|scope| {
            if scope.is_none() && ids.is_none() {
                return self.0.format_event(ctx, writer, event);
            }
            let mut line = String::new();
            self.0.format_event(ctx, Writer::new(&mut line), event)?;
            // `{...}` and its newline: the spans go before the `}`.
            let Some(close) = line.rfind('}') else {
                return writer.write_str(&line);
            };
            let tail = line.split_off(close);
            if let Some(scope) = scope {
                add_scope(&mut line, 0, scope);
            }
            if let Some((trace, span)) = &ids {
                super::traces::add_ids(&mut line, trace, span);
            }
            line.push_str(&tail);
            writer.write_str(&line)
        })
    }
}
