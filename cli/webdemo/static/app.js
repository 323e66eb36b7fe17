// The web demo's page: events in (server-sent), actions out (POST /action), nothing else.
"use strict";

const token = new URLSearchParams(location.search).get("token") || "";
const $ = (id) => document.getElementById(id);
// What the page knows; the browser test reads it too.
const state = window.demoState = {hello: null, status: null, goodput: 0, rtt: 0, markers: 0, packets: null,
                                  sas: null, errors: []};

// ---------------------------------------------------------------- actions
async function act(action) {
  const r = await fetch("action", {method: "POST", headers: {"Content-Type": "application/json", "X-Token": token},
                                   body: JSON.stringify(action)});
  if (!r.ok) say(await r.text(), true);
}

function say(text, bad) {
  const m = $("message");
  m.textContent = text;
  m.className = bad ? "bad" : "";
}

// ---------------------------------------------------------------- the network
const SVG = "http://www.w3.org/2000/svg";
const MAX_PER_COLUMN = 6;

function el(name, attrs, parent, text) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  parent.appendChild(e);
  return e;
}

function layout(net) {
  const columns = {};
  for (const n of net.nodes) (columns[n.column] = columns[n.column] || []).push(n);
  const ncol = Math.max(...net.nodes.map((n) => n.column)) + 1;
  const pos = {}, hidden = {};
  const rows = Math.min(MAX_PER_COLUMN, Math.max(...Object.values(columns).map((c) => c.length)));
  const height = Math.max(220, rows * 62 + 60);
  for (const [col, nodes] of Object.entries(columns)) {
    const shown = nodes.length > MAX_PER_COLUMN ? nodes.slice(0, MAX_PER_COLUMN - 1) : nodes;
    const x = 90 + (ncol === 1 ? 0 : col * (720 / (ncol - 1)));
    const slots = shown.length + (shown.length < nodes.length ? 1 : 0);
    shown.forEach((n, i) => { pos[n.name] = {x, y: (height / (slots + 1)) * (i + 1), node: n}; });
    if (shown.length < nodes.length) {
      const more = nodes.slice(shown.length);
      const y = (height / (slots + 1)) * slots;
      for (const n of more) { pos[n.name] = {x, y, node: n}; hidden[n.name] = true; }
      pos["+" + col] = {x, y, more: more.length};
    }
  }
  return {pos, hidden, height};
}

function path(net, a, b) {  // the links from a to b, breadth first
  const prev = {[a]: null}, queue = [a];
  while (queue.length) {
    const n = queue.shift();
    if (n === b) break;
    for (const l of net.links) {
      for (const [x, y] of [[l.a, l.b], [l.b, l.a]]) {
        if (x === n && !(y in prev)) { prev[y] = n; queue.push(y); }
      }
    }
  }
  const hops = [];
  for (let n = b; n !== null && n !== undefined; n = prev[n]) hops.unshift(n);
  return hops[0] === a ? hops : [];
}

function drawNetwork() {
  const h = state.hello, s = state.status;
  if (!h) return;
  const net = h.network, svg = $("network");
  const {pos, hidden, height} = layout(net);
  svg.setAttribute("viewBox", `0 0 900 ${height}`);
  svg.replaceChildren();
  const on = s && s.ipsec;
  if (on) {  // the protected stretch: a band from one IPsec end to the other
    for (const [a, b] of net.ipsec_pairs) {
      if (hidden[a] || hidden[b]) continue;
      const hops = path(net, a, b);
      if (hops.length > 1) {
        el("polyline", {points: hops.map((n) => `${pos[n].x},${pos[n].y}`).join(" "), class: "esp-band"}, svg);
      }
    }
  }
  for (const l of net.links) {
    if (hidden[l.a] || hidden[l.b]) continue;
    const a = pos[l.a], b = pos[l.b];
    el("line", {x1: a.x, y1: a.y, x2: b.x, y2: b.y, class: "link" + (l.untrusted ? " untrusted" : "")}, svg);
    const label = [l.untrusted ? "untrusted" : "", l.shaped && s ? `${s.rate_mbit} Mbit/s` : ""].filter(Boolean);
    if (label.length) {
      el("text", {x: (a.x + b.x) / 2, y: (a.y + b.y) / 2 - 24, class: "link-label"}, svg, label.join(", "));
    }
  }
  for (const [name, p] of Object.entries(pos)) {
    if (hidden[name]) continue;
    if (p.more) {
      el("text", {x: p.x, y: p.y + 5, class: "node-label"}, svg, `+${p.more} more`);
      continue;
    }
    const end = net.ipsec_ends.includes(name);
    const g = el("g", {class: `node ${p.node.role}` + (end && on ? " ipsec-end" : ""), "data-node": name}, svg);
    if (end && on) el("circle", {cx: p.x, cy: p.y, r: 34, class: "ring"}, g);
    el("rect", {x: p.x - 26, y: p.y - 18, width: 52, height: 36, rx: p.node.role === "host" ? 10 : 3}, g);
    el("text", {x: p.x, y: p.y + 5, class: "node-label"}, g, name);
  }
  const [client, server] = net.flow;
  $("chart-card").querySelector("h2").firstChild.textContent = `Goodput and round trip, ${client} to ${server} `;
}

// ---------------------------------------------------------------- the chart
let chartReady = false;
// traces: 0 goodput with IPsec, 1 without; 2 the round trip with IPsec, 3 without (right-hand axis)
const TRACES = [0, 1, 2, 3];
const pending = {x: TRACES.map(() => []), y: TRACES.map(() => [])};

function initChart() {
  const common = {x: [], y: [], mode: "lines", line: {width: 3}, connectgaps: false};
  const rtt = {...common, yaxis: "y2", line: {width: 1.5, dash: "dot"}};
  Plotly.newPlot("chart", [
    {...common, name: "goodput with IPsec", line: {...common.line, color: "#1b7f3b"}},
    {...common, name: "goodput without IPsec", line: {...common.line, color: "#c0392b"}},
    {...rtt, name: "round trip with IPsec", line: {...rtt.line, color: "#1b7f3b"}},
    {...rtt, name: "round trip without IPsec", line: {...rtt.line, color: "#c0392b"}},
  ], {
    margin: {l: 60, r: 60, t: 10, b: 45}, height: 340, font: {size: 15},
    xaxis: {title: {text: "seconds since the demo started"}}, yaxis: {title: {text: "Mbit/s"}, rangemode: "tozero"},
    yaxis2: {title: {text: "round trip, ms"}, overlaying: "y", side: "right", rangemode: "tozero",
             showgrid: false},
    legend: {orientation: "h", y: 1.18}, shapes: [], annotations: [],
  }, {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"]});
  chartReady = true;
}

function flushChart() {
  if (!chartReady || pending.x.every((xs) => !xs.length)) return;
  Plotly.extendTraces("chart", {x: pending.x, y: pending.y}, TRACES, 1200);
  pending.x = TRACES.map(() => []);
  pending.y = TRACES.map(() => []);
}

function addPoint(first, e, value) {
  const [mine, other] = e.ipsec ? [first, first + 1] : [first + 1, first];
  pending.x[mine].push(e.t); pending.y[mine].push(value);
  pending.x[other].push(e.t); pending.y[other].push(null);  // a gap in the other line
}

function addGoodput(e) {
  state.goodput += 1;
  addPoint(0, e, e.mbps);
  $("goodput-now").textContent = `${e.mbps.toFixed(2)} Mbit/s ${e.ipsec ? "with " + e.profile : "without IPsec"}`;
}

function addRtt(e) {
  state.rtt += 1;
  addPoint(2, e, e.ms);
  $("rtt-now").textContent = `round trip ${e.ms < 10 ? e.ms.toFixed(2) : e.ms.toFixed(0)} ms`;
}

function addMarker(e) {
  state.markers += 1;
  if (!chartReady) return;
  const layout = document.getElementById("chart").layout;
  const shapes = [...(layout.shapes || []), {type: "line", xref: "x", yref: "paper", x0: e.t, x1: e.t, y0: 0, y1: 1,
                                             line: {color: "#555", width: 1, dash: "dot"}}];
  const annotations = [...(layout.annotations || []),
    {x: e.t, xref: "x", y: 1, yref: "paper", text: e.text, showarrow: false, textangle: -90, xanchor: "right",
     yanchor: "top", font: {size: 12, color: "#444"}}];
  Plotly.relayout("chart", {shapes, annotations});
}

// ---------------------------------------------------------------- controls
function fill(select, values, fmt, current) {
  select.replaceChildren(...values.map((v) => {
    const o = document.createElement("option");
    o.value = v; o.textContent = fmt(v);
    return o;
  }));
  select.value = current;
}

function showStatus() {
  const s = state.status;
  if (!s) return;
  document.body.dataset.ipsec = s.ipsec ? "on" : "off";
  document.body.dataset.traffic = s.traffic ? "on" : "off";
  const b = $("ipsec-toggle");
  b.textContent = s.ipsec ? `IPsec is ON (${s.profile}): switch off` : "IPsec is OFF: switch on";
  b.className = s.ipsec ? "on" : "off";
  $("traffic-toggle").textContent = s.traffic ? "Stop traffic" : "Start traffic";
  $("profile").value = s.profile;
  $("rate").value = s.rate_mbit;
  $("size").value = s.size;
  $("show-keys").checked = s.keys;
  $("status").textContent = s.ipsec ? `ESP: ${s.profile}` : "plaintext";
  $("status").className = "pill " + (s.ipsec ? "on" : "off");
  for (const id of ["ipsec-toggle", "profile", "rate", "size", "traffic-toggle", "capture", "show-keys"]) {
    $(id).disabled = false;
  }
  drawNetwork();
}

function wire() {
  $("ipsec-toggle").onclick = () => act({action: "ipsec", on: !state.status.ipsec});
  $("traffic-toggle").onclick = () => act({action: "traffic", on: !state.status.traffic});
  $("capture").onclick = () => { say("capturing…"); act({action: "capture"}); };
  $("profile").onchange = (e) => act({action: "profile", name: e.target.value});
  $("rate").onchange = (e) => act({action: "rate", mbit: Number(e.target.value)});
  $("size").onchange = (e) => act({action: "size", mss: Number(e.target.value)});
  $("show-keys").onchange = (e) => act({action: "keys", show: e.target.checked});
  $("pcap-link").href = "pcap?token=" + encodeURIComponent(token);
}

// ---------------------------------------------------------------- packets and SAs
function rows(tbody, items, cells) {
  tbody.replaceChildren(...items.map((it) => {
    const tr = document.createElement("tr");
    tr.className = it.proto === "ESP" || it.proto === "AH" ? "protected" : "plain";
    for (const c of cells(it)) {
      const td = document.createElement("td");
      td.textContent = c === null || c === undefined ? "" : c;
      tr.appendChild(td);
    }
    return tr;
  }));
}

function showPackets(e) {
  state.packets = e;
  rows($("captured").tBodies[0], e.captured,
       (p) => [p.n, p.src, p.dst, p.proto, p.spi, p.seq, p.length, p.summary || "encrypted payload"]);
  rows($("decrypted").tBodies[0], e.decrypted,
       (d) => [d.n, d.spi, d.seq, d.src, d.dst, d.inner, d.summary]);
  $("packets-note").textContent = e.note;
  $("packets-source").textContent = e.source;
  $("pcap-link").className = e.captured.length ? "" : "disabled";
  say(`captured ${e.captured.length} packets`);
}

function showSas(e) {
  state.sas = e;
  const box = $("sas");
  box.replaceChildren(...Object.entries(e.nodes).map(([node, text]) => {
    const d = document.createElement("div");
    const h = document.createElement("h3");
    h.textContent = `${node}: ip -s xfrm state`;
    const pre = document.createElement("pre");
    pre.textContent = text || (e.ipsec ? "(no SA yet)" : "(no SA: IPsec is off)");
    d.append(h, pre);
    return d;
  }));
}

// ---------------------------------------------------------------- the walk-through
const STEPS = [
  {title: "The network", text: (n) => `${n.flow[0]} talks to ${n.flow[1]}. The red dashed link stands for the ` +
    "Internet: anyone on it can listen. IPsec runs between the ringed nodes (green band): there, and only " +
    "there, packets are protected."},
  {title: "What a listener sees", text: () => "Capture packets on the untrusted link. With IPsec on, the left " +
    "table shows only ESP: the addresses are those of the IPsec ends, the payload is encrypted, and each packet " +
    "carries its SA's number (SPI) and a sequence number.", action: {action: "capture"}},
  {title: "What is inside", text: () => "The right table is the same packets decrypted with this run's keys: " +
    "the hosts' own packets. Only someone with the keys sees this. Download them with the keys and open them in " +
    "Wireshark: it decrypts them the same way."},
  {title: "The speed with IPsec", text: () => "Start the traffic: iperf3 sends as fast as the shaped link " +
    "allows. The goodput stays a little under the link's rate: every packet carries ESP's header, IV, padding " +
    "and ICV.", action: {action: "traffic", on: true}},
  {title: "And without", text: () => "Switch IPsec off: the goodput rises by what those extra bytes cost. " +
    "Capture again: the untrusted link now carries the hosts' packets in plaintext. The dotted line is the " +
    "round trip of a small probe beside the traffic: with the link full it is mostly the wait in the link's " +
    "queue, with IPsec or without; the tunnel's own share is what the encryption takes per packet.",
   action: {action: "ipsec", on: false}},
  {title: "Small packets pay most", text: () => "Switch IPsec on again and set the segment payload to 100 bytes: " +
    "ESP's bytes per packet are the same, so their share, and the gap to plain, grow. Seeds 002 and 003 drew " +
    "this curve; `ipsec-testbed sweep` measures it.", action: [{action: "ipsec", on: true},
                                                               {action: "size", mss: 100}]},
  {title: "When the CPU is the limit", text: () => "Set the link to 100 Mbit/s and the segments back to 1460 " +
    "bytes, then try 3des-cbc-sha1: the cipher, not the link, sets the speed now (this machine's CPU, in " +
    "software). AES-GCM is much cheaper.", action: [{action: "size", mss: 1460}, {action: "rate", mbit: 100}]},
  {title: "The SAs", text: () => "The SA pane shows each end's security associations: algorithm, SPI, and " +
    "counters of bytes and packets that grow as the traffic runs. 'show keys' reveals the keys the decryption " +
    "used; each run makes new ones."},
];
let step = 0;

function showStep() {
  const s = STEPS[step], net = state.hello ? state.hello.network : {flow: ["the client", "the server"]};
  $("step").replaceChildren();
  const h = document.createElement("h3");
  h.textContent = `${step + 1}. ${s.title}`;
  const p = document.createElement("p");
  p.textContent = s.text(net);
  $("step").append(h, p);
  $("step-count").textContent = `step ${step + 1} of ${STEPS.length}`;
  $("step-prev").disabled = step === 0;
  $("step-next").disabled = step === STEPS.length - 1;
  $("step-do").disabled = !s.action;
}

async function doStep() {
  for (const a of [].concat(STEPS[step].action || [])) await act(a);
}

// ---------------------------------------------------------------- events
function handle(e) {
  switch (e.event) {
    case "building": $("where").textContent = e.text + "…"; break;
    case "hello":
      state.hello = e;
      $("where").textContent = `${e.network.topology}, ${e.network.mode} mode, ${e.keying}, in ${e.backend}`;
      fill($("profile"), e.profiles, (v) => v, e.profile);
      fill($("rate"), e.rates, (v) => `${v} Mbit/s`, e.rate_mbit);
      fill($("size"), e.sizes, (v) => `${v} bytes`, e.size);
      state.status = e;
      showStatus(); showStep();
      break;
    case "status": state.status = e; showStatus(); break;
    case "goodput": addGoodput(e); break;
    case "rtt": addRtt(e); break;
    case "marker": addMarker(e); break;
    case "packets": showPackets(e); break;
    case "sas": showSas(e); break;
    case "error": state.errors.push(e.text); say(e.text, true); break;
    case "bye":
      $("status").textContent = "ended"; $("status").className = "pill";
      say("The demo has ended: its network is removed.", true);
      for (const b of document.querySelectorAll("button, select, input")) b.disabled = true;
      break;
  }
}

function connect() {
  const es = new EventSource("events?token=" + encodeURIComponent(token));
  es.onopen = () => { document.body.dataset.connected = "yes"; };
  es.onmessage = (m) => handle(JSON.parse(m.data));
  es.onerror = () => { document.body.dataset.connected = "no"; };
}

initChart();
wire();
showStep();
$("step-prev").onclick = () => { step -= 1; showStep(); };
$("step-next").onclick = () => { step += 1; showStep(); };
$("step-do").onclick = doStep;
setInterval(flushChart, 500);
connect();
