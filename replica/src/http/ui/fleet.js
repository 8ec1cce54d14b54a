// The fleet view: draws every SyncGroup's clusters as cells on one canvas, from the snapshots
// the replica streams on /ui/events (server-sent events), a timeline of the rollout, and a
// cluster's details on click. No framework and no build step: this file is served as it is.
"use strict";

// Cells are sized to the fleet: the largest size, between these, at which every cell fits in
// the window above the chart.
const CELL_MAX = 96;
const CELL_MIN = 3;
// A cell this large carries its cluster's name.
const CELL_NAMED = 40;
const TIMELINE_HEIGHT = 160;
const STATE_COLOURS = {
  U: ["#2ea043", "updated"],
  P: ["#388bfd", "in progress"],
  W: ["#6e7681", "pending"],
  F: ["#f85149", "failed"],
  H: ["#e5a50a", "held"],
  X: ["#8957e5", "unreachable"],
};
// Colours by revision: the target is green, older ones walk through other hues.
const REVISION_COLOURS = ["#2ea043", "#a371f7", "#db61a2", "#3fb950", "#d29922", "#79c0ff"];
const TIMELINE_SAMPLES = 600;

// What the page shows, for people and for the browser test.
window.starlingView = {
  ready: false,
  snapshots: 0,
  revision: 0,
  cells: 0,
  counts: { updated: 0, inProgress: 0, pending: 0, failed: 0, held: 0, unreachable: 0, total: 0 },
  lastRenderMs: 0,
};

const view = { snapshot: null, hits: [], colour: "state", samples: [], layout: { cell: 10, gap: 2 }, chartGroup: null };

function legend() {
  const el = document.getElementById("legend");
  el.innerHTML = "";
  for (const [code, [colour, name]] of Object.entries(STATE_COLOURS)) {
    const span = document.createElement("span");
    span.dataset.state = code;
    span.innerHTML = `<i style="background:${colour}"></i>${name}`;
    el.appendChild(span);
  }
}

function short(revision) {
  if (!revision) return "-";
  const at = revision.indexOf("@sha1:");
  return at < 0 ? revision : revision.slice(0, at + 6 + 8);
}

function cellColour(snapshot, group, state, rev) {
  if (view.colour === "state") return STATE_COLOURS[state][0];
  if (rev < 0) return "#30363d";
  const target = snapshot.revisions.indexOf(group.target);
  if (rev === target) return REVISION_COLOURS[0];
  return REVISION_COLOURS[1 + (rev % (REVISION_COLOURS.length - 1))];
}

// The height the cells take at one cell size.
function heightAt(snapshot, width, cell, gap) {
  const perRow = Math.max(1, Math.floor((width - 8) / (cell + gap)));
  let height = 8;
  for (const group of snapshot.groups) {
    height += 22;
    for (const part of group.partitions) {
      height += 16 + Math.ceil(part.states.length / perRow) * (cell + gap) + 6;
    }
  }
  return { perRow, height };
}

// The largest cell size at which every cell fits in `room` pixels of height (the smallest
// size when none does: then the page scrolls).
function layout(snapshot, width, room) {
  for (let cell = CELL_MAX; cell > CELL_MIN; cell--) {
    const gap = cell >= 8 ? 2 : 1;
    const { perRow, height } = heightAt(snapshot, width, cell, gap);
    if (height <= room) return { cell, gap, perRow, height };
  }
  const { perRow, height } = heightAt(snapshot, width, CELL_MIN, 1);
  return { cell: CELL_MIN, gap: 1, perRow, height };
}

// The height left for the cells: the window, less the header, the chart and the margins.
function roomForCells() {
  const header = document.querySelector("header").getBoundingClientRect().height;
  return Math.max(120, window.innerHeight - header - TIMELINE_HEIGHT - 48);
}

// Draws a snapshot; returns the time it took in milliseconds.
function render(snapshot) {
  const started = performance.now();
  view.snapshot = snapshot;
  const canvas = document.getElementById("cells");
  const width = Math.max(200, canvas.parentElement.clientWidth);
  const { cell, gap, perRow, height } = layout(snapshot, width, roomForCells());
  view.layout = { cell, gap, perRow, height };
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.height = height + "px";
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.clearRect(0, 0, width, height);
  ctx.textBaseline = "top";
  const hits = [];
  const counts = { updated: 0, inProgress: 0, pending: 0, failed: 0, held: 0, unreachable: 0, total: 0 };
  let y = 8;
  for (const group of snapshot.groups) {
    const s = group.summary;
    counts.updated += s.updated;
    counts.inProgress += s.inProgress;
    counts.pending += s.pending;
    counts.failed += s.failed;
    counts.held += s.held || 0;
    counts.unreachable += s.unreachable || 0;
    counts.total += s.total;
    ctx.fillStyle = "#d8dee6";
    ctx.font = "bold 13px system-ui, sans-serif";
    const pinned = group.pinned ? `  pinned to ${short(group.pinned)}` : "";
    ctx.fillText(
      `${group.namespace}/${group.name}  ${group.phase}  ${short(group.target)}${pinned}  ` +
        `${s.updated}/${s.total} updated, ${s.inProgress} in progress, ${s.failed} failed, budget ${group.budget}`,
      4, y);
    y += 22;
    for (const part of group.partitions) {
      ctx.fillStyle = "#8b96a3";
      ctx.font = "11px system-ui, sans-serif";
      ctx.fillText(`${part.label} (${part.states.length})`, 4, y);
      y += 16;
      const names = part.clusters.split(" ");
      const top = y;
      for (let i = 0; i < part.states.length; i++) {
        const x = 4 + (i % perRow) * (cell + gap);
        const cy = top + Math.floor(i / perRow) * (cell + gap);
        ctx.fillStyle = cellColour(snapshot, group, part.states[i], part.revs[i]);
        ctx.fillRect(x, cy, cell, cell);
      }
      if (cell >= CELL_NAMED) nameCells(ctx, names, top, cell, gap, perRow);
      const rows = Math.ceil(part.states.length / perRow);
      hits.push({ top, rows, perRow, group, names, part });
      y = top + rows * (cell + gap) + 6;
    }
  }
  view.hits = hits;
  const elapsed = performance.now() - started;
  const sv = window.starlingView;
  sv.ready = true;
  sv.revision = snapshot.revision;
  sv.cells = counts.total;
  sv.counts = counts;
  sv.lastRenderMs = elapsed;
  sv.layout = { cell, gap, perRow, height, room: roomForCells() };
  document.getElementById("summary").textContent =
    `${counts.total} clusters: ${counts.updated} updated, ${counts.inProgress} in progress, ` +
    `${counts.pending} pending, ${counts.failed} failed, ${counts.held} held, ` +
    `${counts.unreachable} unreachable`;
  return elapsed;
}

// Writes each cluster's name in the lower part of its cell, cut to the cell's width. The
// middle of the cell stays bare, so its colour can be read back (`cellPixels`).
function nameCells(ctx, names, top, cell, gap, perRow) {
  ctx.font = "10px system-ui, sans-serif";
  ctx.fillStyle = "#0f1419";
  ctx.textBaseline = "bottom";
  for (let i = 0; i < names.length; i++) {
    let name = names[i];
    while (name.length > 1 && ctx.measureText(name).width > cell - 4) name = name.slice(0, -1);
    const x = 4 + (i % perRow) * (cell + gap);
    const cy = top + Math.floor(i / perRow) * (cell + gap);
    ctx.fillText(name, x + 2, cy + cell - 2);
  }
  ctx.textBaseline = "top";
}

// The group the chart shows: the one last clicked, else the first.
function chartGroup(snapshot) {
  return snapshot.groups.find((g) => `${g.namespace}/${g.name}` === view.chartGroup) || snapshot.groups[0];
}

// Live samples of clusters in progress (the state keeps no history of those), at the state's
// clock, so they line up with the chart drawn from the rollout history.
function sample(snapshot) {
  const group = chartGroup(snapshot);
  const at = Date.parse(snapshot.time) / 1000;
  if (!group || Number.isNaN(at)) return;
  const key = `${group.namespace}/${group.name}`;
  view.samples = view.samples.filter((s) => s.key === key);
  view.samples.push({ key, t: at, inProgress: group.summary.inProgress });
  if (view.samples.length > TIMELINE_SAMPLES) view.samples.shift();
}

function clock(seconds) {
  return new Date(seconds * 1000).toISOString().slice(11, 19);
}

// The newest rollout of the chart's group, from its history: clusters on its revision over
// time (green), clusters in progress while the page watched (blue) and the budget (dashed),
// with a time axis and a count axis from 0. The caption sits above the plot.
function timeline() {
  const canvas = document.getElementById("timeline");
  const width = canvas.parentElement.clientWidth;
  const height = TIMELINE_HEIGHT;
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.height = height + "px";
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.clearRect(0, 0, width, height);
  ctx.font = "11px system-ui, sans-serif";
  ctx.textBaseline = "top";
  const plot = { left: 44, right: width - 12, top: 26, bottom: height - 22 };
  const drawn = { points: 0, labels: [], captionBottom: 18, plotTop: plot.top, plotBottom: plot.bottom };
  window.starlingView.timeline = drawn;
  const group = view.snapshot && chartGroup(view.snapshot);
  const chart = group && group.chart;
  ctx.fillStyle = "#8b96a3";
  if (!chart) {
    ctx.fillText("no rollout yet", plot.left, 6);
    return;
  }
  const span = Math.max(1, chart.ended - chart.started);
  const top = Math.max(1, chart.total);
  const x = (seconds) => plot.left + (Math.min(Math.max(seconds, 0), span) / span) * (plot.right - plot.left);
  const y = (count) => plot.bottom - (count / top) * (plot.bottom - plot.top);
  const label = (text, lx, ly, align) => {
    ctx.textAlign = align;
    ctx.fillText(text, lx, ly);
    drawn.labels.push(text);
  };
  // Caption, above the plot.
  ctx.textAlign = "left";
  ctx.fillText(
    `${group.namespace}/${group.name} rollout #${chart.id} to ${short(chart.revision)} (${chart.trigger}), ` +
      `${chart.outcome}: updated / in progress / budget`,
    plot.left, 6);
  // Axes and their labels.
  ctx.strokeStyle = "#2c3642";
  ctx.setLineDash([]);
  ctx.beginPath();
  ctx.moveTo(plot.left, plot.top);
  ctx.lineTo(plot.left, plot.bottom);
  ctx.lineTo(plot.right, plot.bottom);
  ctx.stroke();
  ctx.textBaseline = "middle";
  for (const count of [0, Math.round(top / 2), top]) label(`${count}`, plot.left - 6, y(count), "right");
  ctx.textBaseline = "top";
  // Up to four intervals, never two labels for the same second.
  const ticks = Math.max(1, Math.min(4, Math.floor(span)));
  for (let i = 0; i <= ticks; i++) {
    const at = (span * i) / ticks;
    label(clock(chart.started + at), x(at), plot.bottom + 5, i === 0 ? "left" : i === ticks ? "right" : "center");
  }
  ctx.textAlign = "left";
  // Clusters on the revision: a step line from the start to the end.
  ctx.strokeStyle = "#2ea043";
  ctx.lineWidth = 2;
  ctx.beginPath();
  ctx.moveTo(x(0), y(0));
  let count = 0;
  for (const [at, updated] of chart.updated) {
    ctx.lineTo(x(at), y(count));
    ctx.lineTo(x(at), y(updated));
    count = updated;
    drawn.points += 1;
  }
  ctx.lineTo(x(span), y(count));
  ctx.stroke();
  // In progress, as watched.
  const watched = view.samples.filter((s) => s.t >= chart.started);
  if (watched.length > 1) {
    ctx.strokeStyle = "#388bfd";
    ctx.beginPath();
    watched.forEach((s, i) => {
      const px = x(s.t - chart.started);
      const py = y(s.inProgress);
      if (i) ctx.lineTo(px, py);
      else ctx.moveTo(px, py);
    });
    ctx.stroke();
  }
  // The budget.
  ctx.lineWidth = 1;
  ctx.strokeStyle = "#e5a50a";
  ctx.setLineDash([4, 4]);
  ctx.beginPath();
  ctx.moveTo(x(0), y(group.budget));
  ctx.lineTo(x(span), y(group.budget));
  ctx.stroke();
  ctx.setLineDash([]);
}

async function details(group, name) {
  const aside = document.getElementById("details");
  const sync = `${group.name}-${name}`;
  aside.innerHTML = `<h2>${name}</h2><p class="muted">loading…</p>`;
  const response = await fetch(`/ui/api/sync/${encodeURIComponent(group.namespace)}/${encodeURIComponent(sync)}`);
  if (!response.ok) {
    aside.innerHTML = `<h2>${name}</h2><p>${response.status}: no sync ${sync}</p>`;
    return;
  }
  const body = await response.json();
  const status = body.status || {};
  const rows = [
    ["SyncGroup", `${group.namespace}/${group.name}`],
    ["State", status.rolloutState],
    ["Applied", status.lastAppliedRevision],
    ["Attempted", status.lastAttemptedRevision],
    ["Last apply", status.lastApplyTime],
    ["Result", status.result],
    ["Message", status.message],
    ["Ready", status.resourcesLeastStatus],
    ["Objects", (status.inventory || []).length],
    ["Revisions", (status.revisionHistory || []).map((r) => `${short(r.revision)} at ${r.appliedAt}`).join("<br>")],
  ];
  aside.innerHTML = `<h2>${name}</h2><dl>${rows
    .filter(([, v]) => v !== undefined && v !== null && v !== "")
    .map(([k, v]) => `<dt>${k}</dt><dd>${v}</dd>`)
    .join("")}</dl>`;
}

function onClick(event) {
  const canvas = document.getElementById("cells");
  const rect = canvas.getBoundingClientRect();
  const px = event.clientX - rect.left;
  const py = event.clientY - rect.top;
  const step = view.layout.cell + view.layout.gap;
  for (const hit of view.hits) {
    if (py < hit.top || py >= hit.top + hit.rows * step) continue;
    const column = Math.floor((px - 4) / step);
    const row = Math.floor((py - hit.top) / step);
    const index = row * hit.perRow + column;
    if (column >= 0 && column < hit.perRow && index < hit.names.length) {
      view.chartGroup = `${hit.group.namespace}/${hit.group.name}`;
      timeline();
      details(hit.group, hit.names[index]);
    }
    return;
  }
}

// A made-up snapshot of `count` clusters in one group: for measuring the drawing alone.
function synthetic(count) {
  const states = "UUUUUPPWWFH";
  let names = [];
  let codes = "";
  const revs = [];
  for (let i = 0; i < count; i++) {
    names.push(`c${i}`);
    codes += states[i % states.length];
    revs.push(i % 3);
  }
  return {
    revision: 0,
    time: "",
    revisions: ["main@sha1:aaaa", "main@sha1:bbbb", "main@sha1:cccc"],
    groups: [{
      namespace: "default", name: "synthetic", target: "main@sha1:aaaa", phase: "Progressing",
      pinned: null, budget: Math.ceil(count / 10),
      summary: {
        total: count,
        updated: [...codes].filter((c) => c === "U").length,
        inProgress: [...codes].filter((c) => c === "P").length,
        pending: [...codes].filter((c) => c === "W").length,
        failed: [...codes].filter((c) => c === "F").length,
        held: [...codes].filter((c) => c === "H").length,
      },
      partitions: [{ label: "all", clusters: names.join(" "), states: codes, revs }],
    }],
  };
}

// The audit log's newest entries (who changed what), fetched again when the state moved on,
// at most every few seconds.
let auditFetched = { revision: -1, at: 0 };
async function audit(revision) {
  const now = Date.now();
  if (revision === auditFetched.revision || now - auditFetched.at < 5000) return;
  auditFetched = { revision, at: now };
  const panel = document.getElementById("audit");
  const response = await fetch("/ui/api/audit");
  if (!response.ok) {
    panel.innerHTML = `<h2>Recent changes</h2><p class="muted">unavailable: ${response.status}</p>`;
    return;
  }
  const entries = await response.json();
  window.starlingView.auditEntries = entries.length;
  const list = document.createElement("ul");
  for (const entry of entries) {
    const item = document.createElement("li");
    const object = entry.kind ? `${entry.kind} ${entry.namespace ? entry.namespace + "/" : ""}${entry.name}` : "";
    item.textContent = `${entry.at} ${entry.actor.name}: ${entry.action} ${object}${entry.detail ? " (" + entry.detail + ")" : ""}`;
    list.appendChild(item);
  }
  panel.innerHTML = "<h2>Recent changes</h2>";
  if (entries.length === 0) panel.innerHTML += '<p class="muted">none recorded</p>';
  panel.appendChild(list);
}

function connect() {
  const status = document.getElementById("status");
  const events = new EventSource("/ui/events");
  events.addEventListener("snapshot", (event) => {
    const snapshot = JSON.parse(event.data);
    window.starlingView.snapshots += 1;
    render(snapshot);
    sample(snapshot);
    timeline();
    status.textContent = `state revision ${snapshot.revision}, ${snapshot.time}`;
    audit(snapshot.revision);
    status.classList.remove("stale");
  });
  events.onerror = () => {
    status.textContent = "disconnected: reconnecting…";
    status.classList.add("stale");
  };
}

// The colour each cell shows on the canvas now, read back from its pixels, in draw order.
function cellPixels() {
  const canvas = document.getElementById("cells");
  const ctx = canvas.getContext("2d");
  const ratio = window.devicePixelRatio || 1;
  const colours = [];
  const { cell, gap } = view.layout;
  for (const hit of view.hits) {
    for (let i = 0; i < hit.part.states.length; i++) {
      const x = 4 + (i % hit.perRow) * (cell + gap) + cell / 2;
      const y = hit.top + Math.floor(i / hit.perRow) * (cell + gap) + cell / 2;
      const [r, g, b] = ctx.getImageData(Math.floor(x * ratio), Math.floor(y * ratio), 1, 1).data;
      colours.push("#" + [r, g, b].map((v) => v.toString(16).padStart(2, "0")).join(""));
    }
  }
  return colours;
}

// The centre of the i-th cell in draw order, in the page's client coordinates.
function cellCentre(index) {
  const rect = document.getElementById("cells").getBoundingClientRect();
  const { cell, gap } = view.layout;
  for (const hit of view.hits) {
    if (index < hit.part.states.length) {
      return {
        x: rect.left + 4 + (index % hit.perRow) * (cell + gap) + cell / 2,
        y: rect.top + hit.top + Math.floor(index / hit.perRow) * (cell + gap) + cell / 2,
      };
    }
    index -= hit.part.states.length;
  }
  return null;
}

window.starling = { render, timeline, synthetic, cellPixels, cellCentre, colours: STATE_COLOURS };
legend();
document.getElementById("cells").addEventListener("click", onClick);
document.getElementById("colour").addEventListener("change", (event) => {
  view.colour = event.target.value;
  if (view.snapshot) render(view.snapshot);
});
window.addEventListener("resize", () => {
  if (view.snapshot) render(view.snapshot);
  timeline();
});
timeline();
connect();
