// dbscheduler dashboard: live refresh, local times, selection, confirmations. No framework.
(function () {
  "use strict";

  const body = document.body;
  const root = body.dataset.root;            // the app's own path, wherever it is mounted
  const api = root + "api/";
  const refreshMs = Number(body.dataset.refreshMs) || 4000;
  const readOnly = body.dataset.readOnly === "true";
  const live = document.getElementById("live");
  const selected = new Set();
  let skewMs = 0;                            // database clock minus this browser's clock
  let inflight = null;                      // the refresh under way, if any

  // ---- times: relative to the database clock, absolute in the viewer's zone -------------
  const timeFormat = new Intl.DateTimeFormat(undefined, {
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
  });
  const dayFormat = new Intl.DateTimeFormat(undefined, { weekday: "short", day: "numeric", month: "short" });
  const yearFormat = new Intl.DateTimeFormat(undefined, { day: "numeric", month: "short", year: "numeric" });
  const fullFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "full", timeStyle: "long" });

  function dayKey(date) { return date.getFullYear() + "-" + date.getMonth() + "-" + date.getDate(); }

  // "today, 13:09:45 CET", "tomorrow, 03:00:00 CET", "Thu 3 Dec, 03:00:00 CET": in the viewer's zone.
  function absolute(at, now) {
    const date = new Date(at);
    const today = new Date(now);
    const tomorrow = new Date(now + 86400000);
    const yesterday = new Date(now - 86400000);
    let day;
    if (dayKey(date) === dayKey(today)) day = "today";
    else if (dayKey(date) === dayKey(tomorrow)) day = "tomorrow";
    else if (dayKey(date) === dayKey(yesterday)) day = "yesterday";
    else if (date.getFullYear() === today.getFullYear()) day = dayFormat.format(date);
    else day = yearFormat.format(date);
    return day + ", " + timeFormat.format(date);
  }

  function humanize(ms) {
    const secs = Math.round(Math.abs(ms) / 1000);
    if (secs < 1) return "now";
    const units = [[86400, "d"], [3600, "h"], [60, "m"], [1, "s"]];
    const parts = [];
    let rest = secs;
    for (const [size, unit] of units) {
      const n = Math.floor(rest / size);
      rest -= n * size;
      if (n || parts.length) parts.push(n ? n + unit : "");
      if (parts.length === 2) break;
    }
    const text = parts.filter(Boolean).join(" ");
    return ms > 0 ? "in " + text : text + " ago";
  }

  function readSkew(scope) {
    const meta = scope.querySelector(".live-meta[data-db-now]");
    if (meta) skewMs = Date.parse(meta.dataset.dbNow) - Date.now();
  }

  function localize(scope) {
    const now = Date.now() + skewMs;
    for (const el of scope.querySelectorAll("time[datetime]")) {
      const at = Date.parse(el.getAttribute("datetime"));
      if (Number.isNaN(at)) continue;
      const fmt = el.dataset.fmt || "both";
      const rel = humanize(at - now);
      const abs = absolute(at, now);
      el.title = fullFormat.format(new Date(at));
      if (fmt === "rel") {
        el.textContent = rel;
      } else if (fmt === "abs") {
        el.textContent = abs;
      } else if (fmt === "list") {
        el.replaceChildren(text("span", abs, "abs-first"), text("span", rel, "rel-after"));
      } else {
        el.replaceChildren(text("span", rel, "rel"), text("span", abs, "abs"));
      }
    }
  }

  function text(tag, value, cls) {
    const el = document.createElement(tag);
    el.textContent = value;
    if (cls) el.className = cls;
    return el;
  }

  // ---- messages -----------------------------------------------------------------------
  let toastTimer = null;
  function toast(message, isError) {
    const el = document.getElementById("toast");
    el.textContent = message;
    el.classList.toggle("is-error", Boolean(isError));
    el.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { el.hidden = true; }, isError ? 8000 : 3500);
  }

  async function call(method, path, payload) {
    const init = { method, headers: { Accept: "application/json" } };
    if (payload !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(payload);
    }
    const response = await fetch(api + path, init);
    let data = null;
    try { data = await response.json(); } catch (_) { /* an empty or non-JSON body */ }
    if (!response.ok) {
      const message = data && data.message ? data.message : response.status + " " + response.statusText;
      throw new Error(message);
    }
    return data;
  }

  function enc(name) { return encodeURIComponent(name); }

  // ---- the confirmation dialog --------------------------------------------------------
  function confirmDialog({ title, message, okLabel, danger, extra }) {
    const dialog = document.getElementById("confirm");
    document.getElementById("confirm-title").textContent = title;
    document.getElementById("confirm-text").textContent = message;
    const holder = document.getElementById("confirm-extra");
    holder.replaceChildren(...(extra ? [extra] : []));
    const ok = document.getElementById("confirm-ok");
    ok.textContent = okLabel || "Confirm";
    ok.className = "btn " + (danger ? "btn-danger solid" : "btn-primary");
    dialog.returnValue = "";
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
      dialog.showModal();
    });
  }

  // ---- live refresh ---------------------------------------------------------------------
  function partialUrl() {
    const url = new URL(live.dataset.partial, location.href);
    const params = new URLSearchParams(location.search);
    for (const [key, value] of params) url.searchParams.set(key, value);
    return url;
  }

  // A refresh asked for while another runs waits for it, then fetches afresh: the page
  // always ends up showing what the database holds after the caller's change.
  async function refresh() {
    if (!live) return;
    while (inflight) await inflight;
    inflight = swapLive();
    try {
      await inflight;
    } finally {
      inflight = null;
    }
  }

  async function swapLive() {
    try {
      const response = await fetch(partialUrl(), { headers: { Accept: "text/html" } });
      if (response.status === 404 && live.dataset.name !== undefined) {
        toast("This task no longer exists.", true);
        return;
      }
      if (!response.ok) throw new Error(response.status + " " + response.statusText);
      const html = await response.text();
      const template = document.createElement("template");
      template.innerHTML = html;
      readSkew(template.content);
      localize(template.content);
      restoreSelection(template.content);
      // Keyboard users keep their place: refocus the same checkbox or button after the swap.
      const focused = document.activeElement;
      const focusKey = focused && live.contains(focused)
        ? (focused.value ? 'input.select[value="' + CSS.escape(focused.value) + '"]'
          : focused.dataset.action ? '[data-action="' + focused.dataset.action + '"]'
            : focused.id === "select-all" ? "#select-all" : null)
        : null;
      live.replaceChildren(template.content);
      if (focusKey) {
        const again = live.querySelector(focusKey);
        if (again) again.focus({ preventScroll: true });
      }
      updateBulkBar();
    } catch (err) {
      toast("Could not refresh: " + err.message, true);
    }
  }

  function schedule() {
    setTimeout(async () => {
      if (!document.hidden && !document.querySelector("dialog[open]")) await refresh();
      schedule();
    }, refreshMs);
  }

  // ---- the tasks page: filters, search, selection, bulk actions -------------------------
  function setQuery(changes) {
    const params = new URLSearchParams(location.search);
    for (const [key, value] of Object.entries(changes)) {
      if (value) params.set(key, value); else params.delete(key);
    }
    params.delete("page");
    const query = params.toString();
    history.replaceState(null, "", location.pathname + (query ? "?" + query : ""));
  }

  function restoreSelection(scope) {
    for (const box of scope.querySelectorAll("input.select")) {
      box.checked = selected.has(box.value);
      box.closest("tr").classList.toggle("is-selected", box.checked);
    }
  }

  function updateBulkBar() {
    const bar = document.getElementById("bulkbar");
    if (!bar) return;
    bar.hidden = selected.size === 0;
    document.getElementById("bulk-count").textContent =
      selected.size + (selected.size === 1 ? " task selected" : " tasks selected");
    const all = document.getElementById("select-all");
    if (all) {
      const boxes = [...document.querySelectorAll("input.select")];
      all.checked = boxes.length > 0 && boxes.every((b) => b.checked);
      all.indeterminate = !all.checked && boxes.some((b) => b.checked);
    }
  }

  const bulkWords = {
    pause: ["Pause", "paused", "They will not run on any node until resumed."],
    resume: ["Resume", "resumed", "They run at their next time, at once if it has passed."],
    trigger: ["Run now", "triggered", "Each runs as soon as a node picks it."],
  };

  async function bulk(action) {
    const names = [...selected];
    const [verb, done, explain] = bulkWords[action];
    const listed = names.slice(0, 5).join(", ") + (names.length > 5 ? ", …" : "");
    const ok = await confirmDialog({
      title: verb + " " + names.length + (names.length === 1 ? " task?" : " tasks?"),
      message: listed + ". " + explain,
      okLabel: verb,
    });
    if (!ok) return;
    let result;
    try {
      result = await call("POST", "tasks/" + action, { names });
    } catch (err) {
      toast(err.message, true);
      return;
    }
    selected.clear();
    await refresh();
    if (result.failed.length) {
      toast(result.done.length + " " + done + "; " + result.failed.length + " not: " +
        result.failed.map((f) => f.name + " (" + f.error + ")").join(", "), true);
    } else {
      toast(result.done.length + (result.done.length === 1 ? " task " : " tasks ") + done + ".");
    }
  }

  function initTasksPage() {
    const search = document.getElementById("search");
    let debounce = null;
    search.addEventListener("input", () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => { setQuery({ q: search.value.trim() }); refresh(); }, 250);
    });
    document.getElementById("search-form").addEventListener("submit", (event) => {
      event.preventDefault();
      setQuery({ q: search.value.trim() });
      refresh();
    });
    live.addEventListener("click", (event) => {
      const filter = event.target.closest("a.filter");
      if (!filter) return;
      event.preventDefault();
      setQuery({ state: filter.dataset.state });
      refresh();
    });
    live.addEventListener("change", (event) => {
      const box = event.target;
      if (box.id === "select-all") {
        for (const b of live.querySelectorAll("input.select")) {
          b.checked = box.checked;
          if (box.checked) selected.add(b.value); else selected.delete(b.value);
          b.closest("tr").classList.toggle("is-selected", b.checked);
        }
      } else if (box.classList.contains("select")) {
        if (box.checked) selected.add(box.value); else selected.delete(box.value);
        box.closest("tr").classList.toggle("is-selected", box.checked);
      }
      updateBulkBar();
    });
    const bar = document.getElementById("bulkbar");
    if (bar) {
      bar.addEventListener("click", (event) => {
        const button = event.target.closest("button");
        if (!button) return;
        if (button.id === "bulk-clear") {
          selected.clear();
          restoreSelection(live);
          updateBulkBar();
        } else if (button.dataset.bulk) {
          bulk(button.dataset.bulk);
        }
      });
    }
  }

  // ---- the task page: actions behind a confirmation -----------------------------------
  function localInputValue(date) {
    const pad = (n) => String(n).padStart(2, "0");
    return date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) +
      "T" + pad(date.getHours()) + ":" + pad(date.getMinutes());
  }

  async function taskAction(action, name) {
    const path = "tasks/" + enc(name);
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    if (action === "reschedule") {
      const label = text("label", "Next run (" + zone + ")");
      const input = document.createElement("input");
      input.type = "datetime-local";
      input.id = "reschedule-at";
      input.required = true;
      input.value = localInputValue(new Date(Date.now() + skewMs + 3600 * 1000));
      label.append(input);
      if (!await confirmDialog({ title: "Reschedule " + name + "?",
        message: "It runs once at this time, then follows its schedule.",
        okLabel: "Reschedule", extra: label })) return;
      const at = new Date(input.value);
      if (Number.isNaN(at.getTime())) { toast("Pick a date and a time.", true); return; }
      await run(() => call("POST", path + "/reschedule", { at: at.toISOString() }),
        "Rescheduled " + name + ".");
      return;
    }
    if (action === "delete") {
      const running = Boolean(document.querySelector(".chip-running"));
      if (!await confirmDialog({ title: "Delete " + name + "?",
        message: "Its row, state and counters are removed. A node that still registers it " +
          "inserts it again when it starts." + (running ? " It is running now: the run goes on." : ""),
        okLabel: "Delete", danger: true })) return;
      try {
        await call("DELETE", path + (running ? "?force=true" : ""));
        location.href = root;
      } catch (err) {
        toast(err.message, true);
      }
      return;
    }
    const words = {
      trigger: ["Run " + name + " now?", "It runs as soon as a node picks it.", "Run now", "Triggered"],
      pause: ["Pause " + name + "?", "It will not run on any node until resumed. A run in progress goes on.", "Pause", "Paused"],
      resume: ["Resume " + name + "?", "It runs at its next time, at once if that has passed.", "Resume", "Resumed"],
      cancel: ["Cancel the running " + name + "?", "The run is asked to stop; it sees the request within a heartbeat.", "Cancel run", "Asked to stop:"],
    }[action];
    if (!words) return;
    if (!await confirmDialog({ title: words[0], message: words[1], okLabel: words[2] })) return;
    let before = null;
    await run(async () => { before = await call("POST", path + "/" + action); },
      words[3] + " " + name + ".");
    if (action === "trigger" && before) followRun(path, before.total_attempt);
  }

  // After "Run now": show the run as the node writes it (picked, then finished), not at
  // the next periodic refresh.
  async function followRun(path, startedBefore) {
    const deadline = Date.now() + 15000;
    let seen = null;
    while (Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      let info;
      try { info = await call("GET", path); } catch (_) { return; }
      const now = info.total_attempt + "/" + info.running + "/" + info.last_finished_at;
      if (now !== seen) { seen = now; await refresh(); }
      if (info.total_attempt > startedBefore && !info.running) {
        // The run row is written with the finish; a failure's traceback a moment later.
        await new Promise((resolve) => setTimeout(resolve, 400));
        await refresh();
        return;
      }
    }
  }

  async function run(request, success) {
    try {
      await request();
    } catch (err) {
      toast(err.message, true);
      return;
    }
    await refresh();
    toast(success);
  }

  function initTaskPage() {
    live.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-action]");
      if (!button) return;
      taskAction(button.dataset.action, button.closest(".actions").dataset.name);
    });
  }

  // ---- the batches page: handler filter, drop behind a confirmation ---------------------
  function initBatchesPage() {
    live.addEventListener("click", async (event) => {
      const filter = event.target.closest("a.filter");
      if (filter) {
        event.preventDefault();
        setQuery({ handler: filter.dataset.handler });
        refresh();
        return;
      }
      const button = event.target.closest("button[data-drop]");
      if (!button || readOnly) return;
      const { key, handler, items } = button.dataset;
      const count = Number(items);
      if (!await confirmDialog({
        title: "Drop " + key + "?",
        message: "Its " + count + (count === 1 ? " pending item is" : " pending items are") +
          " removed and never delivered (handler " + handler + "). A delivery already under way ends as usual.",
        okLabel: "Drop", danger: true,
      })) return;
      let result;
      try {
        result = await call("POST", "batches/drop", { handler, key });
      } catch (err) {
        toast(err.message, true);
        return;
      }
      await refresh();
      toast("Dropped " + result.dropped + (result.dropped === 1 ? " item" : " items") + " of " + key + ".");
    });
  }

  // ---- the runs page: filters typed in the browser's time zone, sent as UTC -------------
  function initRunFilters() {
    const form = document.getElementById("run-filters");
    if (!form) return;
    for (const input of form.querySelectorAll("input[data-utc]")) {
      if (input.dataset.utc) input.value = localInputValue(new Date(input.dataset.utc)) +
        ":" + String(new Date(input.dataset.utc).getSeconds()).padStart(2, "0");
    }
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const params = new URLSearchParams();
      for (const [key, value] of new FormData(form)) {
        if (!value) continue;
        const input = form.elements.namedItem(key);
        params.set(key, input && input.dataset && "utc" in input.dataset
          ? new Date(value).toISOString() : value);
      }
      const query = params.toString();
      location.assign(form.action + (query ? "?" + query : ""));
    });
  }

  // ---- creating and editing a runtime task ------------------------------------------------
  function initTaskForm() {
    const form = document.getElementById("task-form");
    if (!form) return;
    const field = (name) => form.elements.namedItem(name);
    const preview = document.getElementById("schedule-preview");
    const dataError = document.getElementById("data-error");
    let timer = null;
    let asked = 0;

    async function showPreview() {
      const typed = field("schedule").value.trim();
      const mine = ++asked;
      if (!typed) { preview.replaceChildren(); return; }
      let result;
      try {
        result = await call("GET", "schedules/preview?n=5&schedule=" + enc(typed));
      } catch (err) {
        if (mine !== asked) return;
        preview.replaceChildren(text("p", err.message, "field-error"));
        field("schedule").setAttribute("aria-invalid", "true");
        return;
      }
      if (mine !== asked) return;
      field("schedule").removeAttribute("aria-invalid");
      const list = document.createElement("ol");
      list.className = "upcoming";
      for (const at of result.times) {
        const li = document.createElement("li");
        const time = document.createElement("time");
        time.setAttribute("datetime", at);
        time.dataset.fmt = "list";
        li.append(time);
        list.append(li);
      }
      const parts = [text("p", result.words, "preview-words"), list];
      if (result.note) parts.push(text("p", result.note, "muted note"));
      preview.replaceChildren(...parts);
      localize(preview);
    }

    function parsedData() {
      const raw = field("data").value.trim();
      if (!raw) { dataError.hidden = true; return { ok: true, value: null }; }
      try {
        const value = JSON.parse(raw);
        dataError.hidden = true;
        field("data").removeAttribute("aria-invalid");
        return { ok: true, value };
      } catch (err) {
        dataError.textContent = "Not JSON: " + err.message;
        dataError.hidden = false;
        field("data").setAttribute("aria-invalid", "true");
        return { ok: false };
      }
    }

    field("schedule").addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(showPreview, 250);
    });
    field("data").addEventListener("input", parsedData);
    if (field("schedule").value) showPreview();
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const name = field("name").value.trim();
      const handler = field("handler").value.trim();
      const schedule = field("schedule").value.trim();
      const data = parsedData();
      if (!name || !handler || !schedule) {
        toast("Name, handler and schedule are needed.", true);
        return;
      }
      if (!data.ok) return;
      const button = document.getElementById("save");
      button.disabled = true;
      try {
        const saved = await call("PUT", "tasks/" + enc(name), { handler, schedule, data: data.value });
        const note = saved.warning ? "?saved=" + enc(saved.warning) : "?saved=";
        location.assign(root + "tasks/" + enc(name) + note);
      } catch (err) {
        toast(err.message, true);
        button.disabled = false;
      }
    });
  }

  function showSaved() {
    const params = new URLSearchParams(location.search);
    if (!params.has("saved")) return;
    const warning = params.get("saved");
    toast(warning ? "Saved. Warning: " + warning : "Saved.", Boolean(warning));
    params.delete("saved");
    const query = params.toString();
    history.replaceState(null, "", location.pathname + (query ? "?" + query : ""));
  }

  // ---- start ------------------------------------------------------------------------------
  readSkew(document);
  localize(document);
  initTaskForm();
  showSaved();
  const retry = document.getElementById("retry");
  if (retry) {
    // An error page of an unreachable database tries again by itself.
    let left = Number(retry.dataset.retryS) || 5;
    const tick = () => {
      retry.textContent = "Trying again in " + left + " s…";
      if (left-- <= 0) location.reload(); else setTimeout(tick, 1000);
    };
    tick();
  }
  if (live) {
    if (document.getElementById("search")) initTasksPage();
    else if (live.dataset.page === "batches") initBatchesPage();
    else if (live.dataset.page === "runs") initRunFilters();
    else if (!readOnly) initTaskPage();
    schedule();
  }
})();
