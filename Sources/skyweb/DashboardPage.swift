/// The dashboard's page: one HTML file, one style sheet and one script, served by skyweb
/// itself. Nothing comes from elsewhere (no CDN, no fonts), so it works offline; the script
/// builds every cell with `textContent`, never HTML, since error messages come from handlers.
enum DashboardPage {
    static let html = """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Sky dashboard</title>
        <link rel="stylesheet" href="/dashboard.css">
        <script src="/dashboard.js" defer></script>
        </head>
        <body>
        <header>
          <h1>Sky</h1>
          <span id="broker"></span>
          <span id="connection" class="pill">connecting…</span>
        </header>
        <div id="banner" hidden></div>
        <section id="totals" class="cards"></section>
        <section>
          <h2>Workers</h2>
          <table id="workers">
            <thead><tr><th>Worker</th><th>Host</th><th>State</th><th>Capacity</th><th>Running</th>
            <th>Completed</th><th>Failed</th><th>Last heard</th><th>Services</th></tr></thead>
            <tbody></tbody>
          </table>
          <p id="no-workers" class="empty">No workers connected.</p>
        </section>
        <section>
          <h2>Services</h2>
          <table id="services">
            <thead><tr><th>Service</th><th>Queued</th><th>Rate/s</th><th>p50</th><th>p99</th>
            <th>Failed (last s)</th><th>Completed (since skyweb started)</th><th>Failed (since skyweb started)</th>
            <th>Rate limit</th><th>Paused</th><th></th></tr></thead>
            <tbody></tbody>
          </table>
          <form id="limit-form">
            <input id="limit-service" placeholder="service" size="14" autocomplete="off">
            <input id="limit-rate" placeholder="rate: 100/s, 30/m" size="14" autocomplete="off">
            <input id="limit-burst" placeholder="burst (optional)" size="12" autocomplete="off">
            <label><input id="limit-per-key" type="checkbox"> per key</label>
            <input id="limit-key-field" placeholder="key field (optional)" size="14" autocomplete="off">
            <button type="submit" class="set-limit">Set limit</button>
            <button type="button" class="remove-limit">Remove limit</button>
          </form>
          <p id="service-message" hidden></p>
        </section>
        <section id="charts-section">
          <h2>The last hour</h2>
          <label>Service <select id="chart-service"><option value="">all services</option></select></label>
          <div class="charts">
            <figure id="chart-throughput"><figcaption>Completed a second</figcaption></figure>
            <figure id="chart-failures"><figcaption>Failed a second</figcaption></figure>
            <figure id="chart-queue"><figcaption>Queued</figcaption></figure>
            <figure id="chart-latency"><figcaption>p50 and p99 (ms)</figcaption></figure>
          </div>
        </section>
        <section>
          <h2>Recent failures</h2>
          <table id="failures">
            <thead><tr><th>Time</th><th>Service</th><th>Status</th><th>Error</th><th>Message</th>
            <th>Worker</th><th>Request</th></tr></thead>
            <tbody></tbody>
          </table>
          <p id="no-failures" class="empty">No failures seen.</p>
        </section>
        <section>
          <h2>Departures</h2>
          <ul id="departures"></ul>
        </section>
        <section id="jobs-section">
          <h2>Durable jobs</h2>
          <p id="job-counts" class="empty">The broker keeps no journal (started with --state-dir none).</p>
          <form id="job-search">
            <input id="job-id" placeholder="job id (26 characters)" size="30" autocomplete="off">
            <select id="job-state">
              <option value="">any state</option><option>queued</option><option>scheduled</option>
              <option>running</option><option>succeeded</option><option>failed</option><option>cancelled</option>
            </select>
            <input id="job-service" placeholder="service" size="14" autocomplete="off">
            <button type="submit">Search</button>
          </form>
          <p id="job-message" hidden></p>
          <table id="job-results">
            <thead><tr><th>Job</th><th>Service</th><th>State</th><th>Detail</th><th></th></tr></thead>
            <tbody></tbody>
          </table>
          <div id="flow" hidden>
            <h3 id="flow-title"></h3>
            <ul id="flow-tree" class="tree"></ul>
          </div>
        </section>
        <section id="failed-section">
          <h2>Failed jobs</h2>
          <p id="failed-counts" class="empty">No failed jobs.</p>
          <p id="failed-message" hidden></p>
          <table id="failed-types">
            <thead><tr><th>Error type</th><th class="num">Jobs</th><th></th></tr></thead>
            <tbody></tbody>
          </table>
        </section>
        <section id="schedules-section">
          <h2>Schedules</h2>
          <p id="schedule-counts" class="empty">The broker keeps no journal, so it keeps no schedules.</p>
          <p id="schedule-message" hidden></p>
          <table id="schedules">
            <thead><tr><th>Schedule</th><th>Timing</th><th>State</th><th>Next tick (UTC)</th><th>Service</th>
            <th>Overlap</th><th>Last job</th><th></th></tr></thead>
            <tbody></tbody>
          </table>
        </section>
        </body>
        </html>
        """

    static let css = """
        :root { color-scheme: light dark; --bad: #c62828; --ok: #2e7d32; --muted: #777; }
        body { font: 14px/1.4 system-ui, sans-serif; margin: 0 1.5rem 2rem; }
        header { display: flex; align-items: baseline; gap: 1rem; }
        h1 { margin: .6rem 0; }
        h2 { font-size: 1.05rem; margin: 1.4rem 0 .4rem; }
        .pill { padding: .1rem .6rem; border-radius: 1rem; background: var(--muted); color: #fff; font-size: .85rem; }
        .pill.live { background: var(--ok); }
        .pill.down { background: var(--bad); }
        #banner { background: var(--bad); color: #fff; padding: .6rem 1rem; font-weight: 600; }
        .cards { display: flex; flex-wrap: wrap; gap: .8rem; margin-top: .8rem; }
        .card { border: 1px solid #8884; border-radius: .4rem; padding: .4rem .8rem; min-width: 7rem; }
        .card b { display: block; font-size: 1.3rem; }
        table { border-collapse: collapse; width: 100%; }
        th, td { text-align: left; padding: .25rem .6rem; border-bottom: 1px solid #8883; }
        pre.job-log { margin: .3rem 0 0; max-height: 12rem; overflow: auto; font-size: .8rem; }
        td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
        tr.failed td.count { color: var(--bad); font-weight: 600; }
        .empty { color: var(--muted); }
        .message { max-width: 40rem; overflow-wrap: anywhere; }
        code { font-size: .9em; }
        button { margin-right: .3rem; }
        .charts { display: flex; flex-wrap: wrap; gap: 1rem; }
        .charts figure { margin: 0; width: 22rem; }
        .charts figcaption { font-size: .85rem; color: var(--muted); }
        .charts svg { width: 100%; height: 6rem; border: 1px solid #8884; }
        .charts polyline { fill: none; stroke: var(--ok); stroke-width: 1.5; }
        .charts polyline.p99, #chart-failures polyline { stroke: var(--bad); }
        ul.tree, ul.tree ul { list-style: none; padding-left: 1.2rem; margin: .2rem 0; }
        ul.tree li[data-state="failed"] > span { color: var(--bad); font-weight: 600; }
        ul.tree li[data-state="succeeded"] > span::before { content: "✓ "; }
        """

    static let script = """
        "use strict";
        const $ = (id) => document.getElementById(id);

        function cell(row, text, className) {
          const td = document.createElement("td");
          td.textContent = text === undefined || text === null ? "-" : String(text);
          if (className) td.className = className;
          row.appendChild(td);
          return td;
        }

        function addButton(parent, label, className, onClick) {
          const button = document.createElement("button");
          button.textContent = label;
          button.className = className;
          button.addEventListener("click", onClick);
          parent.appendChild(button);
          return button;
        }

        function ms(value) { return value === undefined || value === null ? "-" : value.toFixed(1) + " ms"; }

        function fill(tbody, items, makeRow) {
          const rows = items.map(makeRow);
          tbody.replaceChildren(...rows);
        }

        function render(state) {
          $("broker").textContent = state.broker;
          const banner = $("banner");
          if (state.unreachableSince) {
            banner.hidden = false;
            banner.textContent = "Broker unreachable since " + state.unreachableSince +
              ": nothing heard since; the figures below are from then.";
          } else if (!state.reachable) {
            banner.hidden = false;
            banner.textContent = "No answer from the broker at " + state.broker +
              " yet; still trying. Is it running, and is skyweb's --broker its clients endpoint?";
          } else {
            banner.hidden = true;
          }
          showConnection(state);
          // The broker's own totals (since it started), unlike the services' (since skyweb did).
          const totals = [
            ["workers", "workers", state.workers.length], ["queued", "queued", state.queued],
            ["in flight", "in flight", state.inFlight],
            ["completed", "completed since the broker started", state.completed],
            ["failed", "failed since the broker started", state.failed],
            ["tasks/s", "tasks/s", state.tasksPerSecond.toFixed(1)],
          ];
          $("totals").replaceChildren(...totals.map(([key, label, value]) => {
            const card = document.createElement("div");
            card.className = "card";
            card.dataset.total = key;
            const b = document.createElement("b");
            b.textContent = String(value);
            card.append(b, label);
            return card;
          }));
          fill($("workers").tBodies[0], state.workers, (w) => {
            const row = document.createElement("tr");
            row.dataset.worker = w.name;
            row.dataset.id = w.id;
            if (w.failed > 0) row.className = "failed";
            cell(row, w.name); cell(row, w.host); cell(row, w.state);
            cell(row, w.capacity, "num"); cell(row, w.running, "num"); cell(row, w.completed, "num");
            cell(row, w.failed, "num count");
            cell(row, w.lastHeardMilliseconds === undefined ? "-" : (w.lastHeardMilliseconds / 1000).toFixed(1) + " s ago");
            cell(row, w.services.join(", "));
            return row;
          });
          $("no-workers").hidden = state.workers.length > 0;
          fill($("services").tBodies[0], state.services, (s) => {
            const row = document.createElement("tr");
            row.dataset.service = s.name;
            if (s.failedTotal > 0) row.className = "failed";
            cell(row, s.name); cell(row, s.queued, "num"); cell(row, s.completedPerSecond.toFixed(1), "num");
            cell(row, ms(s.p50Milliseconds), "num"); cell(row, ms(s.p99Milliseconds), "num");
            cell(row, s.failed, "num"); cell(row, s.completedTotal, "num"); cell(row, s.failedTotal, "num count");
            cell(row, s.limit ? s.limit + (s.throttled ? " (waiting for a token)" : "") : "-", "limit");
            const paused = pausedServices.has(s.name);
            row.dataset.paused = paused ? "yes" : "no";
            cell(row, paused ? "paused" : "-", "paused");
            const actions = cell(row, "");
            if (actionsAllowed) {
              const action = paused ? "resume" : "pause";
              addButton(actions, paused ? "Resume" : "Pause", action, () => actOnService(s.name, action));
            }
            return row;
          });
          fill($("failures").tBodies[0], state.failures, (f) => {
            const row = document.createElement("tr");
            row.dataset.request = f.failure.requestID;
            cell(row, f.time); cell(row, f.failure.service); cell(row, f.failure.status);
            cell(row, f.failure.type); cell(row, f.failure.message, "message"); cell(row, f.failure.worker);
            cell(row, f.failure.requestID).className = "mono";
            return row;
          });
          $("no-failures").hidden = state.failures.length > 0;
          $("departures").replaceChildren(...state.departures.map((d) => {
            const li = document.createElement("li");
            li.dataset.worker = d.name;
            li.textContent = d.time + " " + d.name + " left: " +
              (d.reason === "graceful" && d.tasksHeld > 0 ? "drain grace ran out" : d.reason) +
              (d.tasksHeld > 0 ? ", " + d.tasksHeld + " task(s) sent elsewhere" : "");
            return li;
          }));
          const counts = $("job-counts");
          if (state.jobs) {
            const j = state.jobs;
            counts.className = "";
            counts.textContent = j.held + " held (" + j.queued + " waiting) · submitted " + j.submitted +
              " · succeeded " + j.succeeded + " · failed " + j.failed + " · cancelled " + j.cancelled +
              " · retried " + j.retried + " · journal " + Math.round(j.journalBytes / 1024) + " KiB" +
              (j.journalFailing ? " · JOURNAL FAILING (writes refused: see the broker's log)" : "");
            refreshRecentJobs(j);
            refreshFailed(j);
          }
          actionsAllowed = state.actions;
          if (Date.now() - servicesAt > 10000) loadServices();
          const schedules = state.jobs && state.jobs.schedules;
          const scheduleCounts = $("schedule-counts");
          if (schedules) {
            scheduleCounts.className = "";
            scheduleCounts.textContent = schedules.count + " schedule(s), " + schedules.paused + " paused · fired " +
              schedules.fired + " · skipped " + schedules.skipped +
              (schedules.nextFire ? " · next tick " + schedules.nextFire : "");
            // A tick fired, or one was added, paused or removed: the list shows it.
            const seen = [schedules.count, schedules.paused, schedules.fired, schedules.skipped].join("/");
            if (seen !== lastScheduleCounts) { lastScheduleCounts = seen; loadSchedules(); }
          }
        }

        let lastScheduleCounts = null;

        function scheduleMessage(text) { message("schedule-message", text); }

        async function loadSchedules() {
          try {
            const body = await call("GET", "/api/schedules");
            fill($("schedules").tBodies[0], body.schedules, (schedule) => {
              const row = document.createElement("tr");
              row.dataset.schedule = schedule.name;
              row.dataset.state = schedule.state;
              cell(row, schedule.name); cell(row, schedule.timing); cell(row, schedule.state);
              cell(row, schedule.nextFire); cell(row, schedule.service); cell(row, schedule.overlap);
              cell(row, schedule.lastJob).className = "mono";
              const actions = cell(row, "");
              if (actionsAllowed) {
                const toggle = schedule.state === "paused" ? "resume" : "pause";
                for (const [label, action] of [[toggle === "pause" ? "Pause" : "Resume", toggle], ["Run now", "trigger"]]) {
                  addButton(actions, label, action, () => actOnSchedule(schedule.name, action));
                }
              }
              return row;
            });
            if (body.schedules.length === 0) scheduleMessage("No schedules.");
            else if ($("schedule-message").textContent === "No schedules.") scheduleMessage("");
          } catch (error) {
            scheduleMessage(error.message);
          }
        }

        async function actOnSchedule(name, action) {
          try {
            // encodeURIComponent, not URLSearchParams: that writes a space as "+", which a path's
            // query does not decode.
            const body = await call("POST", "/api/schedules/" + action + "?name=" + encodeURIComponent(name));
            scheduleMessage(action === "trigger" ? "Ran " + name + " now as job " + body.job + "." : "");
            await loadSchedules();
          } catch (error) {
            scheduleMessage(error.message);
          }
        }

        let actionsAllowed = false;
        let lastSearch = null;

        // Paused services, read from the broker at the start, every 10 s and after an action.
        let pausedServices = new Set();
        let servicesAt = 0;
        async function loadServices() {
          servicesAt = Date.now();
          try {
            const body = await call("GET", "/api/services");
            pausedServices = new Set(body.services.filter((s) => s.paused).map((s) => s.name));
          } catch (error) {
            // A broker without service pauses, or none reachable: nothing shows as paused.
          }
        }

        function message(id, text) {
          const p = $(id);
          p.hidden = !text;
          p.textContent = text || "";
        }

        async function actOnService(name, action) {
          try {
            await call("POST", "/api/services/" + action + "?name=" + encodeURIComponent(name));
            await loadServices();
            message("service-message", (action === "pause" ? "Paused " : "Resumed ") + name + ".");
          } catch (error) {
            message("service-message", error.message);
          }
        }

        async function actOnLimit(action) {
          const name = $("limit-service").value.trim();
          const field = $("limit-key-field").value.trim();
          const perKey = $("limit-per-key").checked || field !== "";
          const query = "?name=" + encodeURIComponent(name) + (perKey ? "&perKey=1" : "") + (action === "set"
            ? "&rate=" + encodeURIComponent($("limit-rate").value.trim()) +
              "&burst=" + encodeURIComponent($("limit-burst").value.trim()) +
              (field !== "" ? "&keyField=" + encodeURIComponent(field) : "")
            : "");
          try {
            const body = await call("POST", "/api/limits/" + action + query);
            message("service-message", action === "set" ? "Limited " + name + " to " + body.limit + "." :
              "Removed the " + (perKey ? "per-key limit" : "limit") + " of " + name + ".");
          } catch (error) {
            message("service-message", error.message);
          }
        }

        // Charts of the last hour, drawn here from the 10 s buckets skyweb keeps: a line a
        // figure (two for the latencies), scaled to its highest point.
        const SVG = "http://www.w3.org/2000/svg";
        function chart(id, series) {
          const figure = $(id);
          const caption = figure.querySelector("figcaption");
          const svg = document.createElementNS(SVG, "svg");
          svg.setAttribute("viewBox", "0 0 360 100");
          svg.setAttribute("preserveAspectRatio", "none");
          const values = series.flatMap((s) => s.values.filter((v) => v !== null));
          const top = Math.max(1e-9, ...values);
          for (const s of series) {
            const line = document.createElementNS(SVG, "polyline");
            line.setAttribute("class", s.name);
            line.setAttribute("points", s.values.map((v, i) =>
              i + "," + (100 - 95 * (v === null ? 0 : v) / top).toFixed(1)).join(" "));
            svg.appendChild(line);
          }
          const most = document.createElement("span");
          most.className = "most";
          most.textContent = " (highest " + (values.length ? Math.max(...values).toFixed(1) : "0") + ")";
          figure.replaceChildren(caption, most, svg);
        }

        let chartServices = "";
        async function loadCharts() {
          const service = $("chart-service").value;
          try {
            const body = await call("GET", "/api/history?service=" + encodeURIComponent(service));
            const names = JSON.stringify(body.services);
            if (names !== chartServices) {
              chartServices = names;
              const select = $("chart-service");
              const options = [new Option("all services", "")].concat(body.services.map((n) => new Option(n, n)));
              select.replaceChildren(...options);
              select.value = service;
            }
            const seconds = body.bucketSeconds;
            const points = body.points;
            chart("chart-throughput", [{ name: "completed", values: points.map((p) => p.completed / seconds) }]);
            chart("chart-failures", [{ name: "failed", values: points.map((p) => p.failed / seconds) }]);
            chart("chart-queue", [{ name: "queued", values: points.map((p) => p.queued) }]);
            chart("chart-latency", [
              { name: "p50", values: points.map((p) => p.p50Milliseconds ?? null) },
              { name: "p99", values: points.map((p) => p.p99Milliseconds ?? null) },
            ]);
          } catch (error) {
            // No answer from skyweb: the charts keep what they showed.
          }
        }

        // The failed jobs by error type, looked up again when the jobs' counts change (at most
        // every 2 s).
        let failedSeen = "";
        let failedAt = 0;
        function refreshFailed(j) {
          const seen = [j.failed, j.retried, j.submitted].join("/");
          if (seen === failedSeen || Date.now() - failedAt < 2000) return;
          failedSeen = seen;
          loadFailed();
        }

        async function loadFailed() {
          failedAt = Date.now();
          try {
            const body = await call("GET", "/api/failed");
            const counts = $("failed-counts");
            counts.className = body.failed > 0 ? "" : "empty";
            counts.textContent = body.failed > 0
              ? body.failed + (body.more > 0 ? " (and " + body.more + " more)" : "") +
                " failed jobs, kept for the broker's --failed-retention; by error type:"
              : "No failed jobs.";
            fill($("failed-types").tBodies[0], body.types, (t) => {
              const row = document.createElement("tr");
              row.dataset.type = t.type;
              cell(row, t.type); cell(row, t.count, "num count");
              const actions = cell(row, "");
              if (actionsAllowed) {
                for (const [label, action] of [["Retry all", "retry"], ["Delete all", "delete"]]) {
                  addButton(actions, label, action, () => actOnFailed(t.type, action));
                }
              }
              return row;
            });
          } catch (error) {
            message("failed-message", error.message);
          }
        }

        async function actOnFailed(type, action) {
          try {
            const body = await call("POST", "/api/failed/" + action + "?type=" + encodeURIComponent(type));
            message("failed-message", (action === "retry" ? "Retried " : "Deleted ") + body.acted + " of " +
              body.matched + " failed jobs of type " + type + ".");
            await loadFailed();
          } catch (error) {
            message("failed-message", error.message);
          }
        }

        function jobMessage(text) { message("job-message", text); }

        async function call(method, path) {
          const response = await fetch(path, { method, headers: method === "POST" ? { "X-Sky-Dashboard": "1" } : {} });
          const body = await response.json();
          if (!response.ok) throw new Error(body.error || response.statusText);
          return body;
        }

        function showJobs(jobs) {
          fill($("job-results").tBodies[0], jobs, (job) => {
            const row = document.createElement("tr");
            row.dataset.job = job.id;
            row.dataset.state = job.state;
            cell(row, job.id).className = "mono"; cell(row, job.service); cell(row, job.state);
            const detail = cell(row, job.progress ? job.detail + " — " + job.progress : job.detail);
            if (job.log) {
              // The handler's last log lines, as text (never as markup).
              const log = document.createElement("pre");
              log.className = "job-log";
              log.textContent = job.log.join("\\n");
              detail.appendChild(log);
            }
            const actions = cell(row, "");
            if (job.service === "mmi.flow") {
              addButton(actions, "Steps", "steps", () => showFlow(job.id));
            }
            const ended = ["succeeded", "failed", "cancelled"].includes(job.state);
            // A flow is not retried as a job: submitted again, it is a new flow.
            if (actionsAllowed && !(ended && job.service === "mmi.flow")) {
              const action = ended ? "retry" : "cancel";
              addButton(actions, ended ? "Retry" : "Cancel", action, () => act(job.id, action)).disabled =
                job.state === "succeeded";
            }
            return row;
          });
        }

        // Until the reader searches, the jobs list shows the newest jobs, looked up again when
        // the counts change (at most every 2 s).
        let searched = false;
        let recentSeen = "";
        let recentAt = 0;
        function refreshRecentJobs(j) {
          const seen = [j.submitted, j.succeeded, j.failed, j.cancelled].join("/");
          if (searched || seen === recentSeen || Date.now() - recentAt < 2000) return;
          recentSeen = seen;
          recentAt = Date.now();
          search(false);
        }

        async function search(byReader = true) {
          if (byReader) searched = true;
          const id = $("job-id").value.trim();
          try {
            if (id) {
              lastSearch = () => call("GET", "/api/jobs/" + encodeURIComponent(id)).then((job) => [job]);
            } else {
              const query = new URLSearchParams({ state: $("job-state").value, service: $("job-service").value.trim() });
              lastSearch = () => call("GET", "/api/jobs?" + query).then((body) => body.jobs);
            }
            const jobs = await lastSearch();
            showJobs(jobs);
            jobMessage(jobs.length === 0 ? "No jobs match." : "");
          } catch (error) {
            showJobs([]);
            jobMessage(error.message);
          }
        }

        function flowNode(node) {
          const item = document.createElement("li");
          const label = document.createElement("span");
          if (node.kind === "step") {
            item.dataset.state = node.state;
            item.dataset.step = node.index;
            label.textContent = "step " + node.index + " · " + node.service + " · " + node.state
              + (node.attempt > 0 ? " (attempt " + node.attempt + ")" : "") + (node.job ? " · " + node.job : "");
            item.appendChild(label);
            return item;
          }
          label.textContent = node.kind + (node.kind === "chain" ? "" : " (" + node.parts.length + ")");
          item.appendChild(label);
          const list = document.createElement("ul");
          for (const part of node.parts) list.appendChild(flowNode(part));
          item.appendChild(list);
          return item;
        }

        async function showFlow(id) {
          try {
            const flow = await call("GET", "/api/flows/" + encodeURIComponent(id));
            $("flow-title").textContent = "Flow " + flow.id + " · " + flow.state + " · on failure: " + flow.onFailure;
            const tree = $("flow-tree");
            tree.replaceChildren(flowNode(flow.root));
            $("flow").hidden = false;
            jobMessage("");
          } catch (error) {
            jobMessage(error.message);
          }
        }

        async function act(id, action) {
          try {
            const job = await call("POST", "/api/jobs/" + encodeURIComponent(id) + "/" + action);
            jobMessage(action === "retry" ? "Retried as job " + job.id + "." : "");
            const jobs = lastSearch ? await lastSearch() : [job];
            showJobs(jobs);
          } catch (error) {
            jobMessage(error.message);
          }
        }

        // "live" only while both hold: this page hears skyweb, and skyweb hears the broker.
        let socketOpen = false;
        function showConnection(state) {
          const pill = $("connection");
          if (!socketOpen) {
            pill.textContent = "reconnecting…";
            pill.className = "pill down";
          } else if (state && state.reachable) {
            pill.textContent = "live";
            pill.className = "pill live";
          } else {
            pill.textContent = state && state.unreachableSince ? "broker unreachable" : "no answer from the broker yet";
            pill.className = "pill down";
          }
        }

        let retryDelay = 500;
        function connect() {
          const scheme = location.protocol === "https:" ? "wss://" : "ws://";
          const socket = new WebSocket(scheme + location.host + "/live");
          socket.onopen = () => { retryDelay = 500; socketOpen = true; };
          socket.onmessage = (message) => render(JSON.parse(message.data));
          socket.onclose = () => {
            socketOpen = false;
            showConnection(null);
            setTimeout(connect, retryDelay);
            retryDelay = Math.min(retryDelay * 2, 5000);
          };
        }

        $("job-search").addEventListener("submit", (event) => { event.preventDefault(); search(true); });
        loadServices();
        $("limit-form").addEventListener("submit", (event) => { event.preventDefault(); actOnLimit("set"); });
        document.querySelector("#limit-form .remove-limit").addEventListener("click", () => actOnLimit("remove"));
        $("chart-service").addEventListener("change", loadCharts);
        loadCharts();
        setInterval(loadCharts, 10000);
        connect();
        """
}
