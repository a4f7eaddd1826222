// Replays a specdec recording (the JSON in #recording): scene after scene, each token appearing when the engine
// emitted it. → or Space: next scene; ←: previous; R: replay this scene. "#fast" (or ?fast) plays every scene in
// turn at 1000× and says so in #status when done; ?speed=N plays at N× real time; "#3" opens the third scene.
"use strict";

const DATA = JSON.parse(document.getElementById("recording").textContent);
const PARAMS = new URLSearchParams(location.search);
const FAST = location.hash === "#fast" || PARAMS.has("fast");
const SPEED = FAST ? 1000 : Math.max(0.05, parseFloat(PARAMS.get("speed") || "1") || 1);
const TICK_MS = 30;
const LABELS = {accepted: "accepted", rejected: "rejected", corrected: "corrected", bonus: "bonus",
                plain: "verifier only", unchecked: "not checked"};
const SVG = "http://www.w3.org/2000/svg";

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function tokenNode(tok) {
  const [text, state] = tok;
  const node = el(state === "rejected" ? "del" : "span", "tok " + state);
  node.textContent = state === "rejected" ? text.replace(/\n/g, "↵") : text;
  node.title = LABELS[state] || state;
  return node;
}

function legend() {
  const box = el("div", "legend");
  for (const state of ["accepted", "rejected", "corrected", "bonus", "plain"]) {
    const item = el("span");
    const sw = el("span", "swatch");
    sw.style.background = `var(--${state}-solid)`;
    item.append(sw, LABELS[state]);
    box.append(item);
  }
  return box;
}

function figuresText(f) {
  return f.summary || `${f.tokens} tokens · ${f.tokens_per_s.toFixed(1)} tok/s`;
}

function bigFigures(f) {
  return `${f.tokens_per_s.toFixed(1)} tok/s` + (f.speedup ? ` · ${f.speedup.toFixed(2)}×` : "");
}

function laneColor(lane) {
  if (lane.color) return lane.color;
  return lane.key.startsWith("on") ? "var(--on-lane)" : "var(--off-lane)";
}

// ---- a tokens-over-time chart whose curves grow as the scene plays -------------------------------------
function niceMax(x) {
  if (x <= 0) return 1;
  const step = Math.pow(10, Math.floor(Math.log10(x)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * step >= x) return m * step;
  return 10 * step;
}

function makeChart(lanes) {
  const W = 800, H = 280, L = 70, R = 20, T = 15, B = 45;
  const tMax = niceMax(Math.max(1e-3, ...lanes.map(l => l.curve[l.curve.length - 1][0])));
  const nMax = niceMax(Math.max(1, ...lanes.map(l => l.curve[l.curve.length - 1][1])));
  const x = t => L + (W - L - R) * t / tMax;
  const y = n => H - B - (H - T - B) * n / nMax;
  const chart = svg("svg", {viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img"});
  for (let i = 0; i <= 5; i++) {
    const t = tMax * i / 5, n = nMax * i / 5;
    chart.append(svg("line", {x1: x(t), y1: T, x2: x(t), y2: H - B, class: "grid"}),
                 svg("line", {x1: L, y1: y(n), x2: W - R, y2: y(n), class: "grid"}));
    const tx = svg("text", {x: x(t), y: H - B + 20, "text-anchor": "middle"});
    tx.textContent = +t.toPrecision(3);
    const ty = svg("text", {x: L - 8, y: y(n) + 5, "text-anchor": "end"});
    ty.textContent = +n.toPrecision(3);
    chart.append(tx, ty);
  }
  chart.append(svg("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis"}),
               svg("line", {x1: L, y1: T, x2: L, y2: H - B, class: "axis"}));
  const label = svg("text", {x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle"});
  label.textContent = "seconds (engine time, each run from its own start)";
  const tokens = svg("text", {x: 16, y: (T + H - B) / 2, "text-anchor": "middle",
                              transform: `rotate(-90 16 ${(T + H - B) / 2})`});
  tokens.textContent = "tokens";
  chart.append(label, tokens);
  const lines = lanes.map(lane => {
    const line = svg("polyline", {fill: "none", stroke: laneColor(lane), "stroke-width": lane.faint ? 2 : 4,
                                  "stroke-opacity": lane.faint ? 0.35 : 1, points: ""});
    chart.append(line);
    return line;
  });
  const draw = (i, upTo) => lines[i].setAttribute("points", lanes[i].curve.filter(p => p[0] <= upTo)
    .map(p => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" "));
  return {node: chart, draw};
}

function chartLegend(lanes) {
  const box = el("div", "legend");
  for (const lane of lanes) {
    const item = el("span");
    const sw = el("span", "swatch");
    sw.style.background = laneColor(lane);
    if (lane.faint) sw.style.opacity = 0.35;
    item.append(sw, lane.title);
    box.append(item);
  }
  return box;
}

// ---- a round drawn as a tree ---------------------------------------------------------------------------
function treeNode(nodes, index) {
  const li = el("li");
  const n = nodes[index];
  li.append(el("span", "chip " + n.state, n.text.replace(/\n/g, "↵") || "∅"), " ", el("small", "", LABELS[n.state]));
  const kids = nodes.map((m, j) => [m, j]).filter(([m]) => m.parent === index);
  if (kids.length) {
    const ul = el("ul");
    for (const [, j] of kids) ul.append(treeNode(nodes, j));
    li.append(ul);
  }
  return li;
}

function roundTree(round) {
  const box = el("div", "tree");
  const kind = round.tree ? "draft tree" : "chain of drafts";
  box.append(el("h3", "", `Round ${round.index + 1}, the best of this reply: its ${kind}`));
  const root = el("li");
  root.append(el("span", "chip plain", "…"), " ", el("small", "", "the text so far"));
  const ul = el("ul");
  rootsOf(round.nodes).forEach(i => ul.append(treeNode(round.nodes, i)));
  root.append(ul);
  const top = el("ul");
  top.append(root);
  box.append(top);
  return box;
}

function rootsOf(nodes) {
  return nodes.map((n, i) => [n, i]).filter(([n]) => n.parent < 0).map(([, i]) => i);
}

// ---- scenes: each builds its DOM once and returns a player of its recorded time ------------------------
function replayText(box, tokens, figures) {
  let shown = 0;
  return upTo => {
    while (shown < tokens.length && tokens[shown][3] <= upTo) box.append(tokenNode(tokens[shown++]));
    if (figures) figures();
    return shown >= tokens.length;
  };
}

function replyScene(scene, section) {
  const big = el("p", "big", "");
  const figs = el("p", "figures", "");
  const text = el("div", "reply-text");
  section.append(big, legend(), text, figs);
  if (scene.round) section.append(roundTree(scene.round));
  if (scene.error) section.append(el("p", "figures", "Error: " + scene.error));
  const end = scene.tokens.length ? scene.tokens[scene.tokens.length - 1][3] : 0;
  return {
    duration: end,
    reset() { text.textContent = ""; big.textContent = ""; figs.textContent = ""; this.step = replayText(text,
      scene.tokens, null); },
    tick(upTo) {
      const done = this.step(upTo);
      const n = scene.curve.filter(p => p[0] <= upTo).pop();
      if (n && n[0] > 0) big.textContent = `${(n[1] / n[0]).toFixed(1)} tok/s`;
      if (done && upTo >= end) { big.textContent = bigFigures(scene.figures); figs.textContent =
        figuresText(scene.figures); }
      return done && upTo >= end;
    },
  };
}

function lanesScene(scene, section) {
  const big = el("p", "big", "");
  const result = el("p", "figures", "");
  const chart = makeChart(scene.lanes);
  section.append(big, result, chartLegend(scene.lanes), chart.node, legend());
  const columns = el("div", "columns");
  const panes = scene.lanes.filter(l => !l.faint).map(lane => {
    const pane = el("div", "lane");
    const text = el("div", "reply-text");
    const figs = el("p", "figures", "");
    pane.append(el("h3", "", lane.title), figs, text);
    columns.append(pane);
    return {lane, text, figs};
  });
  section.append(columns);
  const duration = Math.max(0, ...scene.lanes.map(l => l.curve[l.curve.length - 1][0]));
  return {
    duration,
    reset() {
      big.textContent = ""; result.textContent = "";
      this.steps = panes.map(p => { p.text.textContent = ""; p.figs.textContent = ""; return replayText(p.text,
        p.lane.tokens, null); });
      scene.lanes.forEach((_, i) => chart.draw(i, -1));
    },
    tick(upTo) {
      scene.lanes.forEach((_, i) => chart.draw(i, upTo));
      let done = upTo >= duration;
      panes.forEach((p, i) => {
        const finished = this.steps[i](upTo);
        if (finished && upTo >= p.lane.curve[p.lane.curve.length - 1][0]) p.figs.textContent = figuresText(
          p.lane.figures);
        done = done && finished;
      });
      if (done) { big.textContent = scene.headline || ""; result.textContent = scene.result || ""; }
      return done;
    },
  };
}

function noteScene(scene, section) {
  const big = el("p", "big", scene.headline || "");
  const list = el("ul", "lines");
  for (const line of scene.lines) list.append(el("li", "", line));
  section.append(big, list);
  return {duration: 0, reset() {}, tick() { return true; }};
}

const BUILDERS = {reply: replyScene, lanes: lanesScene, note: noteScene};

function buildScene(scene, index) {
  const section = el("section", "scene");
  section.id = "scene-" + index;
  section.hidden = true;
  section.append(el("h2", "", scene.title));
  if (scene.note) section.append(el("p", "note", scene.note));
  if (scene.prompt) section.append(el("p", "prompt", "Prompt: " + scene.prompt));
  const build = BUILDERS[scene.kind];
  if (!build) throw new Error("unknown scene kind: " + scene.kind);
  const player = build(scene, section);
  document.querySelector("main").append(section);
  return {section, player};
}

// ---- the show --------------------------------------------------------------------------------------------
const show = {scenes: [], current: -1, timer: null, onDone: null};

function stopTimer() {
  if (show.timer !== null) clearInterval(show.timer);
  show.timer = null;
}

function play(index, onDone) {
  stopTimer();
  show.scenes.forEach((s, i) => { s.section.hidden = i !== index; });
  show.current = index;
  document.getElementById("counter").textContent = `${index + 1} / ${show.scenes.length}`;
  document.getElementById("prev").disabled = index === 0;
  document.getElementById("next").disabled = index === show.scenes.length - 1;
  const player = show.scenes[index].player;
  player.reset();
  const start = performance.now();
  const tick = () => {
    if (player.tick((performance.now() - start) / 1000 * SPEED)) {
      stopTimer();
      if (onDone) onDone();
    }
  };
  show.timer = setInterval(tick, TICK_MS);
  tick();
}

function go(delta) {
  const index = Math.min(show.scenes.length - 1, Math.max(0, show.current + delta));
  if (index !== show.current) play(index);
}

function playAll(index) {
  if (index >= show.scenes.length) {
    document.getElementById("status").textContent = "Played to the end.";
    document.body.dataset.played = "all";
    return;
  }
  play(index, () => playAll(index + 1));
}

function start() {
  document.title = DATA.title;
  document.getElementById("title").textContent = DATA.title;
  document.getElementById("headline").textContent = DATA.headline.big;
  document.getElementById("headline-words").textContent = DATA.headline.words +
    (DATA.headline.scene ? ` (${DATA.headline.scene})` : "");
  show.scenes = DATA.scenes.map(buildScene);
  document.getElementById("prev").addEventListener("click", () => go(-1));
  document.getElementById("next").addEventListener("click", () => go(1));
  document.getElementById("replay").addEventListener("click", () => play(show.current));
  document.addEventListener("keydown", e => {
    if (e.key === "ArrowRight" || e.key === " " || e.key === "PageDown") { go(1); e.preventDefault(); }
    else if (e.key === "ArrowLeft" || e.key === "PageUp") { go(-1); e.preventDefault(); }
    else if (e.key === "r" || e.key === "R") play(show.current);
  });
  if (!show.scenes.length) {
    document.getElementById("status").textContent = "This recording has no scenes.";
    return;
  }
  const first = /^#(\d+)$/.exec(location.hash);
  if (FAST) playAll(0); else play(first ? Math.min(show.scenes.length, Math.max(1, +first[1])) - 1 : 0);
}

start();
