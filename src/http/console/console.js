// mcp-gateway's admin console: polls the view's JSON and updates the page
// in place. No dependency, no inline script, no HTML built from data (text
// goes in with textContent only). The page is complete without it.
"use strict";
(function () {
  const body = document.body;
  const view = body.dataset.view;
  if (!view) return;
  const base = body.dataset.base || "";
  const api = new URL(body.dataset.api, location.href);
  const every = Number(body.dataset.refreshMs) || 2000;
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  let delay = every;
  let timer = null;
  let busy = false;

  const q = (sel, root) => (root || document).querySelector(sel);
  const qa = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const at = (obj, path) => path.split("/").filter(Boolean).reduce((o, k) => (o == null ? null : o[k]), obj);
  const text = (v) => v == null ? "" : Array.isArray(v) ? v.map(text).join(", ") : typeof v === "object" ? JSON.stringify(v) : String(v);

  // A cell: its text, and its number raw in data-value.
  function setCell(el, v) {
    if (!el) return;
    const t = text(v);
    if (el.textContent !== t) el.textContent = t;
    if (typeof v === "number") el.dataset.value = String(v);
    else if (v == null && "value" in el.dataset) el.dataset.value = "";
  }

  function cellEl(tag, testid) {
    const el = document.createElement(tag);
    el.dataset.testid = testid;
    return el;
  }

  // Keeps `container`'s children matching `selector` in step with `items`:
  // found by key, made when new, removed when gone, in the items' order.
  function sync(container, selector, items, keyOf, make, update) {
    if (!container) return;
    const old = new Map(qa(selector, container).map((el) => [el.dataset.key || "", el]));
    let prev = null;
    for (const item of items) {
      const key = keyOf(item);
      let el = old.get(key);
      if (el) old.delete(key);
      else { el = make(item); el.dataset.key = key; }
      update(el, item);
      const next = prev ? prev.nextElementSibling : container.firstElementChild;
      if (next !== el) container.insertBefore(el, next);
      prev = el;
    }
    for (const el of old.values()) el.remove();
  }

  function keyed(selector, attr) {
    for (const el of qa(selector)) el.dataset.key = el.getAttribute(attr) || "";
  }

  function row(cells, head) {
    const tr = document.createElement("tr");
    if (head) tr.appendChild(head);
    for (const [testid] of cells) tr.appendChild(cellEl("td", testid));
    return tr;
  }

  const UPSTREAM = [["upstream-protocol", "/protocol"], ["upstream-transport", "/transport"],
    ["upstream-state", "/state"], ["upstream-last-error", "/last_error/message"],
    ["upstream-restarts", "/restarts"], ["upstream-calls-per-s", "/recent/calls_per_s"],
    ["upstream-error-rate", "/recent/error_rate"], ["upstream-p50", "/recent/p50_ms"],
    ["upstream-p99", "/recent/p99_ms"], ["upstream-tenants", "/tenants"],
    ["upstream-quarantined", "/quarantined"]];
  const TENANT = [["tenant-upstreams", "/upstreams"], ["tenant-in-flight", "/in_flight"],
    ["tenant-sessions", "/sessions"], ["tenant-refusals-count", "/refusals"]];

  const views = {
    upstreams(doc) {
      keyed('[data-testid="upstream-row"]', "data-upstream");
      sync(q('[data-testid="upstreams"] tbody'), '[data-testid="upstream-row"]', doc.upstreams, (u) => u.name,
        (u) => {
          const th = cellEl("th", "upstream-name");
          th.scope = "row";
          const tr = row(UPSTREAM, th);
          tr.dataset.testid = "upstream-row";
          return tr;
        },
        (tr, u) => {
          tr.setAttribute("data-upstream", u.name);
          tr.setAttribute("data-state", u.state);
          setCell(q('[data-testid="upstream-name"]', tr), u.name);
          for (const [testid, path] of UPSTREAM) setCell(q(`[data-testid="${testid}"]`, tr), at(u, path));
        });
    },
    tenants(doc) {
      keyed('[data-testid="tenant-row"]', "data-tenant");
      sync(q('[data-testid="tenants"] tbody'), '[data-testid="tenant-row"]', doc.tenants, (t) => t.name,
        (t) => {
          const th = document.createElement("th");
          const a = cellEl("a", "tenant-link");
          a.href = "tenants/" + encodeURIComponent(t.name);
          th.appendChild(a);
          const tr = row(TENANT.concat([["tenant-tool-states"]]), th);
          tr.dataset.testid = "tenant-row";
          return tr;
        },
        (tr, t) => {
          tr.setAttribute("data-tenant", t.name);
          setCell(q('[data-testid="tenant-link"]', tr), t.name);
          for (const [testid, path] of TENANT) setCell(q(`[data-testid="${testid}"]`, tr), at(t, path));
          setCell(q('[data-testid="tenant-tool-states"]', tr),
            Object.entries(t.tools || {}).map(([k, n]) => k + " " + n).join(", "));
        });
    },
    tenant(doc) {
      keyed('[data-testid="tool-row"]', "data-tool-id");
      sync(q('[data-testid="tenant-tools"] tbody'), '[data-testid="tool-row"]', doc.tools, (t) => t.id,
        () => {
          const tr = row([["tool-name-mcp"], ["tool-name-v1"], ["tool-state"], ["tool-reason"]]);
          tr.dataset.testid = "tool-row";
          return tr;
        },
        (tr, t) => {
          tr.setAttribute("data-tool-id", t.id);
          tr.setAttribute("data-upstream", t.upstream);
          tr.setAttribute("data-state", t.state);
          setCell(q('[data-testid="tool-name-mcp"]', tr), t.faces.modelcontextprotocol.name);
          setCell(q('[data-testid="tool-name-v1"]', tr), t.faces.v1.name);
          setCell(q('[data-testid="tool-state"]', tr), t.state);
          setCell(q('[data-testid="tool-reason"]', tr), t.reason);
        });
      const l = doc.limits, u = doc.usage;
      const limits = { rate_limit: [l.rate_limit && l.rate_limit.per_second, u.requests_per_s],
        max_concurrency: [l.max_concurrency, u.in_flight], max_sessions: [l.max_sessions, u.sessions],
        max_connections: [l.max_connections, u.connections] };
      for (const tr of qa('[data-testid="limit-row"]')) {
        const [max, current] = limits[tr.dataset.limit] || [null, null];
        tr.setAttribute("data-max", text(max));
        tr.setAttribute("data-current", text(current));
        const cells = qa("td", tr);
        if (cells[0]) cells[0].textContent = text(current);
        if (cells[1]) cells[1].textContent = text(max);
      }
      keyed('[data-testid="refusal-row"]', "data-reason");
      sync(q('[data-testid="tenant-refusals"] tbody'), '[data-testid="refusal-row"]', Object.entries(doc.refusals),
        ([r]) => r,
        () => {
          const tr = document.createElement("tr");
          tr.dataset.testid = "refusal-row";
          tr.appendChild(document.createElement("th"));
          tr.appendChild(document.createElement("td"));
          return tr;
        },
        (tr, [r, n]) => {
          tr.setAttribute("data-reason", r);
          tr.setAttribute("data-count", String(n));
          tr.children[0].textContent = r;
          tr.children[1].textContent = String(n);
        });
      setCell(q('[data-testid="tenant-requests-per-s"]'), u.requests_per_s);
    },
    pins(doc) {
      const section = q('[data-testid="quarantine"]');
      const items = doc.quarantined || [];
      keyed('[data-testid="quarantine-item"]', "data-fingerprint");
      sync(section, '[data-testid="quarantine-item"]', items, (i) => i.upstream + "\n" + i.tool + "\n" + i.pending.fingerprint,
        () => {
          const art = cellEl("article", "quarantine-item");
          art.appendChild(document.createElement("h2"));
          art.appendChild(document.createElement("p"));
          art.appendChild(cellEl("pre", "quarantine-diff"));
          const p = document.createElement("p");
          p.className = "actions";
          for (const [id, label] of [["pin-approve", "Approve"], ["pin-reject", "Reject"]]) {
            const b = cellEl("button", id);
            b.type = "button";
            b.textContent = label;
            p.appendChild(b);
            p.appendChild(document.createTextNode(" "));
          }
          art.appendChild(p);
          return art;
        },
        (art, i) => {
          art.setAttribute("data-upstream", i.upstream);
          art.setAttribute("data-tool", i.tool);
          art.setAttribute("data-fingerprint", i.pending.fingerprint);
          art.setAttribute("data-state", i.state);
          art.setAttribute("data-reason", i.reason);
          art.children[0].textContent = i.upstream + " · " + i.tool;
          art.children[1].textContent = i.reason + "; the definition waiting is " + i.pending.fingerprint + ".";
          setCell(q('[data-testid="quarantine-diff"]', art), i.diff);
        });
      let empty = q('[data-testid="quarantine-empty"]');
      if (items.length && empty) empty.remove();
      if (!items.length && !empty) {
        empty = cellEl("p", "quarantine-empty");
        empty.textContent = "Nothing waits for review.";
        section.prepend(empty);
      }
    },
    config(doc) {
      setCell(q('[data-testid="config-version"]'), doc.version);
      setCell(q('[data-testid="config-gateway-id"]'), doc.gateway_id);
      setCell(q('[data-testid="config-started-at"]'), doc.started_at);
      setCell(q('[data-testid="config-digest"]'), doc.digest);
      setCell(q('[data-testid="config-loaded-at"]'), doc.loaded_at);
      setCell(q('[data-testid="config-reloads"]'), doc.reloads.applied + " applied, " + doc.reloads.rejected + " rejected");
      const last = doc.last_reload;
      const outcome = last ? last.outcome : "none";
      const el = q('[data-testid="reload-outcome"]');
      if (el) { el.setAttribute("data-outcome", outcome); el.textContent = outcome; }
      setCell(q('[data-testid="reload-error"]'), last ? last.error : null);
    },
  };

  function schedule(ms) {
    clearTimeout(timer);
    timer = setTimeout(poll, ms);
  }

  async function poll() {
    if (document.hidden || busy) return;
    busy = true;
    try {
      const r = await fetch(api, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (r.status === 401) { location.href = new URL(base + "login", location.href).href; return; }
      if (!r.ok) throw new Error("HTTP " + r.status);
      const doc = await r.json();
      views[view](doc);
      const live = q('[data-testid="live"]');
      if (live) {
        const now = new Date().toISOString();
        live.setAttribute("data-refreshed-at", now);
        const t = q("time", live);
        if (t) t.textContent = now;
        live.classList.remove("stale");
      }
      delay = every;
    } catch (e) {
      const live = q('[data-testid="live"]');
      if (live) live.classList.add("stale");
      delay = Math.min(delay * 5, 60000);
    } finally {
      busy = false;
    }
    if (!document.hidden) schedule(delay);
  }

  document.addEventListener("visibilitychange", () => {
    if (document.hidden) clearTimeout(timer);
    else schedule(0);
  });

  // Approve or reject a quarantined definition (pins view).
  document.addEventListener("click", async (ev) => {
    const button = ev.target.closest('[data-testid="pin-approve"], [data-testid="pin-reject"]');
    if (!button) return;
    const item = button.closest('[data-testid="quarantine-item"]');
    const approve = button.dataset.testid === "pin-approve";
    const result = q('[data-testid="action-result"]');
    button.disabled = true;
    let outcome = "error", said = "";
    try {
      const r = await fetch(new URL(base + "api/pins/" + (approve ? "approve" : "reject"), location.href), {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
        body: JSON.stringify({ upstream: item.dataset.upstream, tool: item.dataset.tool, fingerprint: item.dataset.fingerprint }),
      });
      const doc = await r.json().catch(() => ({}));
      if (r.ok) outcome = approve ? "approved" : "rejected";
      said = r.ok ? item.dataset.upstream + " · " + item.dataset.tool + ": " + outcome : (doc.error || "HTTP " + r.status);
    } catch (e) {
      said = String(e);
    }
    button.disabled = false;
    if (result) { result.setAttribute("data-outcome", outcome); result.textContent = said; }
    schedule(0);
  });

  schedule(every);
})();
