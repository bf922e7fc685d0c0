// The usage panel of the web page (CONTRACT §8.2): what the signed-in caller's scope used and spent —
// a member's own usage, a team admin's whole team — from GET /api/usage, as a chart by day (uPlot,
// vendor/uplot.min.js) and a table grouped by day, assistant, connector or (admins only) user; the
// operator's token also groups by team, over every team of the deployment (a table, no chart).
// Every piece of data is set as text (textContent), never as HTML.
"use strict";

(() => {
  const chat = window.yaoChat; // app.js: the signed-in request (whose 401 signs the page out) and its errors
  if (!chat) return;

  const DAY_S = 86400;
  const GROUPS = { day: "Day", assistant: "Assistant", connector: "Connector", user: "User", team: "Team" };
  const COST_COLOUR = "#2f5fd0"; // the page's accent (style.css --accent)
  const TOKENS_COLOUR = "#c2570c";
  // The x axis steps through whole days (never hours, even for a one-day range): a row of the ledger is a day.
  const DAY_STEPS = [1, 2, 3, 7, 14, 30, 61, 91, 182, 365, 730].map((days) => days * DAY_S);

  const $ = (id) => document.getElementById(id);
  const ui = {
    toggle: $("usage-toggle"),
    chatView: $("chat-view"),
    panel: $("usage"),
    heading: $("usage-heading"),
    scope: $("usage-scope"),
    close: $("usage-close"),
    form: $("usage-form"),
    from: $("usage-from"),
    to: $("usage-to"),
    by: $("usage-by"),
    status: $("usage-status"),
    empty: $("usage-empty"),
    results: $("usage-results"),
    chart: $("usage-chart"),
    chartSummary: $("usage-chart-summary"),
    tableCaption: $("usage-table-caption"),
    keyHead: $("usage-key-head"),
    rows: $("usage-rows"),
    total: $("usage-total"),
    budgets: $("usage-budgets"),
    budgetList: $("usage-budget-list"),
  };

  const state = {
    open: false,
    // Whether this token may group by user: null until the API has said (a member's 403 says no).
    userGrouping: null,
    // Whether it may group by team (the operator's, over every team): null until the API has said.
    teamGrouping: null,
    asked: 0, // the number of the latest load: an older answer arriving late is dropped
    plot: null, // the uPlot chart on the page
  };

  // ---------------------------------------------------------------- formatting

  const dollars = new Intl.NumberFormat("en-US", {
    style: "currency",
    currency: "USD",
    minimumFractionDigits: 2,
    maximumFractionDigits: 4,
  });
  const integers = new Intl.NumberFormat("en-US");
  const short = new Intl.NumberFormat("en-US", { notation: "compact", maximumFractionDigits: 1 });

  function usd(value) {
    const n = Number(value) || 0;
    if (n > 0 && n < 0.00005) return "<$0.0001"; // $0.0000 would read as free
    return dollars.format(n);
  }

  function count(value) {
    return integers.format(Number(value) || 0);
  }

  function unpricedText(tokens) {
    return `${count(tokens)} ${Number(tokens) === 1 ? "token" : "tokens"} without a known price`;
  }

  /** YYYY-MM-DD of a moment, in UTC: the ledger's days are UTC days. */
  function isoDay(date) {
    return date.toISOString().slice(0, 10);
  }

  function dayStart(day) {
    return Date.parse(`${day}T00:00:00Z`) / 1000;
  }

  /** [first day of this month, today], the range the panel opens on. */
  function thisMonth() {
    const now = new Date();
    return [isoDay(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1))), isoDay(now)];
  }

  function h(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function say(text, kind = "idle") {
    ui.status.textContent = text;
    ui.status.dataset.state = kind;
  }

  // ---------------------------------------------------------------- API

  async function usage(from, to, by) {
    const query = new URLSearchParams({ from, to, by });
    const res = await chat.request("GET", `/api/usage?${query}`);
    if (!res.ok) throw await chat.errorOf(res);
    return res.json();
  }

  /** Whether this token may group by user. A person's own usage has one user: nothing to group. A team's
   *  view asks the API once: a member gets 403 there, an admin the team's users. */
  async function learnUserGrouping(scope, from, to) {
    if (scope.user_id) return false;
    try {
      await usage(from, to, "user");
      return true;
    } catch (err) {
      if (err instanceof chat.ApiError && err.status === 403) return false;
      return null; // not known (the server failed): asked again on the next load
    }
  }

  /** Whether this token may group by team: only the operator's may (anyone else gets 403). */
  async function learnTeamGrouping(from, to) {
    try {
      await usage(from, to, "team");
      return true;
    } catch (err) {
      if (err instanceof chat.ApiError && err.status === 403) return false;
      return null;
    }
  }

  function offerUsers(yes) {
    state.userGrouping = yes;
    offer("user", yes);
  }

  function offerTeams(yes) {
    state.teamGrouping = yes;
    offer("team", yes);
  }

  function offer(value, yes) {
    const option = ui.by.querySelector(`option[value='${value}']`);
    if (yes && !option) {
      const added = h("option", null, GROUPS[value]);
      added.value = value;
      ui.by.append(added);
    } else if (!yes && option) {
      if (ui.by.value === value) ui.by.value = "day";
      option.remove();
    }
  }

  // ---------------------------------------------------------------- loading

  async function load() {
    const from = ui.from.value;
    const to = ui.to.value;
    const by = ui.by.value;
    if (!from || !to) {
      say("Pick the first and the last day.", "error");
      return;
    }
    if (from > to) {
      say("The first day is after the last day.", "error");
      return;
    }
    const number = ++state.asked;
    ui.panel.setAttribute("aria-busy", "true");
    say("Loading usage…", "busy");
    let daily;
    let grouped;
    try {
      // The chart is by day, the table follows the grouping picked; by team (the operator's view of every
      // team) there is no chart: the days are the operator's own scope's, not the deployment's.
      if (by === "team") {
        grouped = await usage(from, to, "team");
        daily = grouped;
      } else {
        [daily, grouped] = await Promise.all([usage(from, to, "day"), by === "day" ? null : usage(from, to, by)]);
      }
    } catch (err) {
      if (number !== state.asked) return;
      ui.panel.setAttribute("aria-busy", "false");
      if (err instanceof chat.ApiError && err.status === 403 && by === "user") {
        offerUsers(false); // an admin token revoked for a member's, say: the grouping goes, the day's view comes back
        say("Usage by user is for team admins.", "error");
        return;
      }
      if (err instanceof chat.ApiError && err.status === 403 && by === "team") {
        offerTeams(false);
        say("Usage by team is the operator's view.", "error");
        return;
      }
      showNothing();
      say(chat.plainError(err), "error");
      return;
    }
    if (number !== state.asked) return;
    if (state.userGrouping === null) {
      const known = await learnUserGrouping(daily.scope || {}, from, to);
      if (number !== state.asked) return;
      if (known !== null) offerUsers(known);
    }
    if (state.teamGrouping === null) {
      const known = await learnTeamGrouping(from, to);
      if (number !== state.asked) return;
      if (known !== null) offerTeams(known);
    }
    ui.panel.setAttribute("aria-busy", "false");
    render(daily, grouped || daily, from, to);
    loadBudgets(number);
  }

  function showNothing() {
    ui.results.hidden = true;
    ui.empty.hidden = true;
    ui.scope.textContent = "";
    ui.rows.replaceChildren();
    ui.total.replaceChildren();
    ui.budgets.hidden = true;
    ui.budgetList.replaceChildren();
  }

  // ---------------------------------------------------------------- rendering

  function scopeText(scope) {
    if (scope.user_id && scope.team_id) return `Your own usage (${scope.user_id} in team ${scope.team_id})`;
    if (scope.user_id) return `Your own usage (${scope.user_id})`;
    if (scope.team_id) return `Team ${scope.team_id}: everyone's usage`;
    return "Every team: the whole deployment's usage";
  }

  /** A total with every field: the API's, else the sum of the rows (a field it leaves out). */
  function totalOf(answer) {
    const rows = answer.rows || [];
    const given = answer.total || {};
    const total = {};
    for (const field of ["runs", "input_tokens", "output_tokens", "cost_usd", "unpriced_tokens"]) {
      total[field] = given[field] ?? rows.reduce((sum, r) => sum + (Number(r[field]) || 0), 0);
    }
    return total;
  }

  function render(daily, grouped, from, to) {
    const scope = daily.scope || {};
    ui.scope.textContent = scopeText(scope);
    ui.scope.dataset.scope = scope.user_id ? "user" : scope.team_id ? "team" : "deployment";
    const rows = grouped.rows || [];
    const total = totalOf(grouped);
    const empty = rows.length === 0;
    ui.empty.hidden = !empty;
    ui.results.hidden = empty;
    if (empty) {
      say("");
      destroyChart();
      return;
    }
    const group = GROUPS[grouped.by] || GROUPS[ui.by.value] || "Key";
    ui.keyHead.textContent = group;
    ui.tableCaption.textContent = `Usage by ${group.toLowerCase()}, ${from} to ${to}`;
    const label = (key) => (grouped.by === "team" && key === "" ? "(no team)" : key);
    ui.rows.replaceChildren(...rows.map((r) => row(label(r.key), r, "td")));
    ui.total.replaceChildren(row("Total", total, "th"));
    // By team there is no chart (its days would be the operator's own scope's): the figure goes.
    ui.chart.closest("figure").hidden = grouped.by === "team";
    if (grouped.by === "team") {
      destroyChart();
      ui.chartSummary.textContent =
        `${usd(total.cost_usd)} over ${count(total.runs)} ${Number(total.runs) === 1 ? "run" : "runs"} of every team, ` +
        `${from} to ${to}; the table below has each team.`;
      say(`Showing ${from} to ${to}.`);
      return;
    }
    drawChart(daily, from, to);
    ui.chartSummary.textContent =
      `${usd(total.cost_usd)} and ${count(Number(total.input_tokens) + Number(total.output_tokens))} tokens ` +
      `over ${count(total.runs)} ${Number(total.runs) === 1 ? "run" : "runs"}, ${from} to ${to}; the table below has each day.`;
    say(`Showing ${from} to ${to}.`);
  }

  function row(label, data, keyTag) {
    const tr = h("tr");
    const key = h(keyTag, "key", label);
    if (keyTag === "th") key.scope = "row";
    const cost = h("td", "num cost");
    cost.append(h("span", "usd", usd(data.cost_usd)));
    if (Number(data.unpriced_tokens) > 0) cost.append(h("span", "unpriced", unpricedText(data.unpriced_tokens)));
    tr.append(
      key,
      h("td", "num runs", count(data.runs)),
      h("td", "num input", count(data.input_tokens)),
      h("td", "num output", count(data.output_tokens)),
      cost,
    );
    return tr;
  }

  // ---------------------------------------------------------------- the chart

  /** [days, cost, tokens] for every day of the range: a day without usage is a zero, not a gap. */
  function chartData(daily, from, to) {
    const byDay = new Map((daily.rows || []).map((r) => [r.key, r]));
    const days = [];
    const cost = [];
    const tokens = [];
    for (let t = dayStart(from); t <= dayStart(to); t += DAY_S) {
      const r = byDay.get(isoDay(new Date(t * 1000)));
      days.push(t);
      cost.push(r ? Number(r.cost_usd) || 0 : 0);
      tokens.push(r ? (Number(r.input_tokens) || 0) + (Number(r.output_tokens) || 0) : 0);
    }
    return [days, cost, tokens];
  }

  const fromZero = (_u, _min, max) => [0, max > 0 ? max * 1.15 : 1];

  function drawChart(daily, from, to) {
    destroyChart();
    if (typeof window.uPlot !== "function") {
      // Without the vendor file the table still says it all.
      ui.chart.replaceChildren(h("p", "muted", "The chart could not be drawn; the table below has the numbers."));
      return;
    }
    const uPlot = window.uPlot;
    const options = {
      width: chartWidth(),
      height: 260,
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),
      cursor: { drag: { x: false, y: false } }, // the dates pick the range: no zooming by dragging
      scales: {
        // Half a day either side: the first and last bars are drawn whole.
        x: { time: true, range: (_u, min, max) => [min - DAY_S / 2, max + DAY_S / 2] },
        usd: { range: fromZero },
        tokens: { range: fromZero },
      },
      series: [
        { label: "Day", value: (_u, ts) => (ts == null ? "–" : isoDay(new Date(ts * 1000))) },
        {
          label: "Cost (USD)",
          scale: "usd",
          fill: COST_COLOUR,
          stroke: COST_COLOUR,
          width: 0,
          paths: uPlot.paths.bars({ size: [0.6, 48] }),
          points: { show: false },
          value: (_u, v) => (v == null ? "–" : usd(v)),
        },
        {
          label: "Tokens",
          scale: "tokens",
          stroke: TOKENS_COLOUR,
          width: 2,
          points: { size: 6, fill: TOKENS_COLOUR },
          value: (_u, v) => (v == null ? "–" : count(v)),
        },
      ],
      axes: [
        { incrs: DAY_STEPS },
        { scale: "usd", size: 72, values: (_u, ticks) => ticks.map(usd) },
        { scale: "tokens", side: 1, size: 56, grid: { show: false }, values: (_u, ticks) => ticks.map(short.format) },
      ],
    };
    ui.chart.replaceChildren();
    state.plot = new uPlot(options, chartData(daily, from, to), ui.chart);
  }

  function chartWidth() {
    return Math.max(280, Math.floor(ui.results.clientWidth));
  }

  function destroyChart() {
    if (state.plot) state.plot.destroy();
    state.plot = null;
  }

  // The chart follows the panel's width (a window resized, a phone turned).
  if (typeof ResizeObserver === "function") {
    new ResizeObserver(() => {
      if (state.plot && !ui.results.hidden && ui.results.clientWidth > 0) {
        state.plot.setSize({ width: chartWidth(), height: 260 });
      }
    }).observe(ui.results);
  }

  // ---------------------------------------------------------------- budgets

  const WINDOWS = { per_day: "today", per_month: "this month" };
  const OWNERS = { team: "Team", user: "User" };

  /** The lines to show of GET /api/budgets: each window with a budget set, its spend and when it resets.
   *  Only entries whose fields this page knows are shown; an answer of another shape shows nothing. */
  function budgetLines(body) {
    const entries = body && Array.isArray(body.budgets) ? body.budgets : [];
    const lines = [];
    for (const b of entries) {
      if (!b || !(b.window in WINDOWS) || !(b.scope in OWNERS)) continue;
      if (typeof b.budget_usd !== "number" || typeof b.spent_usd !== "number") continue; // null: no budget
      const resets = typeof b.resets_at === "string" ? ` (resets ${b.resets_at.slice(0, 10)}, UTC)` : "";
      lines.push(
        `${OWNERS[b.scope]} ${b.id}: ${usd(b.spent_usd)} spent of ${usd(b.budget_usd)} ${WINDOWS[b.window]}${resets}`,
      );
    }
    return lines;
  }

  async function loadBudgets(number) {
    let lines = [];
    try {
      const res = await chat.request("GET", "/api/budgets");
      if (res.ok) lines = budgetLines(await res.json());
    } catch {
      lines = []; // budgets are extra: the usage shown stands without them
    }
    if (number !== state.asked) return;
    ui.budgetList.replaceChildren(...lines.map((line) => h("li", null, line)));
    ui.budgets.hidden = lines.length === 0;
  }

  // ---------------------------------------------------------------- opening, closing

  function open() {
    if (!chat.signedIn()) return;
    state.open = true;
    ui.chatView.hidden = true;
    ui.panel.hidden = false;
    ui.toggle.setAttribute("aria-expanded", "true");
    if (!ui.from.value || !ui.to.value) [ui.from.value, ui.to.value] = thisMonth();
    ui.heading.focus();
    load();
  }

  function close(returnFocus = true) {
    state.open = false;
    ui.panel.hidden = true;
    ui.chatView.hidden = false;
    ui.toggle.setAttribute("aria-expanded", "false");
    if (returnFocus) ui.toggle.focus();
  }

  /** Signing in or out: another token may see another scope, so nothing shown or learnt is kept. */
  function reset() {
    state.asked++;
    if (state.open) close(false);
    offerUsers(false);
    offerTeams(false);
    state.userGrouping = null;
    state.teamGrouping = null;
    destroyChart();
    showNothing();
    say("");
    ui.from.value = "";
    ui.to.value = "";
  }

  ui.toggle.addEventListener("click", () => (state.open ? close() : open()));
  ui.close.addEventListener("click", () => close());
  ui.panel.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !event.defaultPrevented) close();
  });
  ui.form.addEventListener("submit", (event) => {
    event.preventDefault();
    load();
  });
  ui.by.addEventListener("change", load);
  document.addEventListener("yao-agent:session", reset);
})();
