// The fleet view: draws every SyncGroup's clusters as cells on one canvas, from the snapshots
// the replica streams on /ui/events (server-sent events), a timeline of the rollout, and a
// cluster's details on click. No framework and no build step: this file is served as it is.
"use strict";

const CELL = 10;
const GAP = 2;
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

const view = { snapshot: null, hits: [], colour: "state", samples: [] };

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

// Draws a snapshot; returns the time it took in milliseconds.
function render(snapshot) {
  const started = performance.now();
  view.snapshot = snapshot;
  const canvas = document.getElementById("cells");
  const width = Math.max(200, canvas.parentElement.clientWidth);
  const perRow = Math.max(1, Math.floor((width - 8) / (CELL + GAP)));
  // Height first: headers and rows of every partition.
  let height = 8;
  for (const group of snapshot.groups) {
    height += 22;
    for (const part of group.partitions) {
      height += 16 + Math.ceil(part.states.length / perRow) * (CELL + GAP) + 6;
    }
  }
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
        const x = 4 + (i % perRow) * (CELL + GAP);
        const cy = top + Math.floor(i / perRow) * (CELL + GAP);
        ctx.fillStyle = cellColour(snapshot, group, part.states[i], part.revs[i]);
        ctx.fillRect(x, cy, CELL, CELL);
      }
      const rows = Math.ceil(part.states.length / perRow);
      hits.push({ top, rows, perRow, group, names, part });
      y = top + rows * (CELL + GAP) + 6;
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
  document.getElementById("summary").textContent =
    `${counts.total} clusters: ${counts.updated} updated, ${counts.inProgress} in progress, ` +
    `${counts.pending} pending, ${counts.failed} failed, ${counts.held} held, ` +
    `${counts.unreachable} unreachable`;
  return elapsed;
}

function sample(snapshot) {
  const group = snapshot.groups[0];
  if (!group) return;
  view.samples.push({
    t: Date.now(),
    updated: group.summary.updated,
    inProgress: group.summary.inProgress,
    total: group.summary.total,
    budget: group.budget,
  });
  if (view.samples.length > TIMELINE_SAMPLES) view.samples.shift();
}

// The first group's rollout over time: clusters updated (green), in progress (blue) and the
// budget (dashed).
function timeline() {
  const canvas = document.getElementById("timeline");
  const width = canvas.parentElement.clientWidth;
  const height = 140;
  canvas.width = width;
  canvas.height = height;
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, width, height);
  const samples = view.samples;
  if (samples.length < 2) return;
  const t0 = samples[0].t;
  const span = Math.max(1, samples[samples.length - 1].t - t0);
  const top = Math.max(1, ...samples.map((s) => s.total));
  const x = (t) => 30 + ((t - t0) / span) * (width - 40);
  const y = (v) => height - 16 - (v / top) * (height - 28);
  const line = (key, colour, dash) => {
    ctx.strokeStyle = colour;
    ctx.setLineDash(dash);
    ctx.beginPath();
    samples.forEach((s, i) => (i ? ctx.lineTo(x(s.t), y(s[key])) : ctx.moveTo(x(s.t), y(s[key]))));
    ctx.stroke();
  };
  line("updated", "#2ea043", []);
  line("inProgress", "#388bfd", []);
  line("budget", "#e5a50a", [4, 4]);
  ctx.setLineDash([]);
  ctx.fillStyle = "#8b96a3";
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillText(`${top}`, 4, 8);
  ctx.fillText("updated / in progress / budget, since this page opened", 30, height - 12);
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
  for (const hit of view.hits) {
    if (py < hit.top || py >= hit.top + hit.rows * (CELL + GAP)) continue;
    const column = Math.floor((px - 4) / (CELL + GAP));
    const row = Math.floor((py - hit.top) / (CELL + GAP));
    const index = row * hit.perRow + column;
    if (column >= 0 && column < hit.perRow && index < hit.names.length) {
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
      summary: { total: count, updated: 0, inProgress: 0, pending: 0, failed: 0, held: 0 },
      partitions: [{ label: "all", clusters: names.join(" "), states: codes, revs }],
    }],
  };
}

function connect() {
  const status = document.getElementById("status");
  const events = new EventSource("/ui/events");
  events.addEventListener("snapshot", (event) => {
    const snapshot = JSON.parse(event.data);
    window.starlingView.snapshots += 1;
    sample(snapshot);
    render(snapshot);
    timeline();
    status.textContent = `state revision ${snapshot.revision}, ${snapshot.time}`;
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
  for (const hit of view.hits) {
    for (let i = 0; i < hit.part.states.length; i++) {
      const x = 4 + (i % hit.perRow) * (CELL + GAP) + CELL / 2;
      const y = hit.top + Math.floor(i / hit.perRow) * (CELL + GAP) + CELL / 2;
      const [r, g, b] = ctx.getImageData(Math.floor(x * ratio), Math.floor(y * ratio), 1, 1).data;
      colours.push("#" + [r, g, b].map((v) => v.toString(16).padStart(2, "0")).join(""));
    }
  }
  return colours;
}

// The centre of the i-th cell in draw order, in the page's client coordinates.
function cellCentre(index) {
  const rect = document.getElementById("cells").getBoundingClientRect();
  for (const hit of view.hits) {
    if (index < hit.part.states.length) {
      return {
        x: rect.left + 4 + (index % hit.perRow) * (CELL + GAP) + CELL / 2,
        y: rect.top + hit.top + Math.floor(index / hit.perRow) * (CELL + GAP) + CELL / 2,
      };
    }
    index -= hit.part.states.length;
  }
  return null;
}

window.starling = { render, synthetic, cellPixels, cellCentre, colours: STATE_COLOURS };
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
connect();
