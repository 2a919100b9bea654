"""The console's stylesheet and script, shipped in the package (no CDN: the console
works offline). The script draws each group's lag chart as SVG, fetching
/api/groups/<group>/lag again every sampling interval; it builds the DOM with
createElement and textContent only, so names from Kafka never become markup.
"""

STYLESHEET = """\
body { font-family: system-ui, sans-serif; margin: 0; color: #212529; background: #f8f9fa; }
header { background: #1b2a3a; color: #fff; padding: 0.6em 1.2em; display: flex; gap: 1.5em;
         align-items: baseline; }
header a { color: #dbe4ff; text-decoration: none; }
header .brand { font-weight: bold; color: #fff; }
header .cluster { margin-left: auto; color: #adb5bd; font-size: 0.9em; }
main { padding: 1em 1.5em; }
h1 { font-size: 1.4em; margin: 0.3em 0 0.6em; }
h2 { font-size: 1.15em; margin: 1.2em 0 0.5em; }
table { border-collapse: collapse; background: #fff; margin-bottom: 1em; }
th, td { border: 1px solid #dee2e6; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #e9ecef; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.under-replicated td { background: #fff3bf; }
tr.offline td { background: #ffc9c9; }
.badge { display: inline-block; padding: 0 0.4em; border-radius: 0.3em; font-size: 0.85em;
         margin-left: 0.3em; }
.badge.under-replicated { background: #ffd43b; }
.badge.offline { background: #fa5252; color: #fff; }
.badge.internal { background: #ced4da; }
.badge.controller { background: #69db7c; }
.bytes { font-family: ui-monospace, monospace; white-space: pre-wrap; word-break: break-all; }
.hex { color: #5c7cfa; }
.muted { color: #868e96; }
.error { background: #ffe3e3; border: 1px solid #fa5252; padding: 0.8em 1em; }
.notice { background: #d3f9d8; border: 1px solid #40c057; padding: 0.8em 1em; }
form.reset { background: #fff; border: 1px solid #dee2e6; padding: 0.8em 1em; display: inline-block; }
form.reset label { margin-right: 1em; }
#lag-chart svg { background: #fff; border: 1px solid #dee2e6; }
#lag-legend span { margin-right: 1em; font-size: 0.9em; }
#lag-legend i { display: inline-block; width: 1.2em; height: 0.25em; vertical-align: middle;
                margin-right: 0.3em; }
"""

SCRIPT = """\
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var TOTAL_COLOUR = "#d9480f";
  var PALETTE = ["#1c7ed6", "#2f9e44", "#7048e8", "#0c8599", "#c2255c", "#5c940d",
                 "#364fc7", "#862e9c", "#087f5b", "#495057"];
  var WIDTH = 760, HEIGHT = 280, LEFT = 60, RIGHT = 16, TOP = 14, BOTTOM = 30;

  function node(name, attrs) {
    var element = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (key) { element.setAttribute(key, attrs[key]); });
    return element;
  }

  function text(x, y, content, anchor) {
    var label = node("text", {x: x, y: y, "font-size": 11, fill: "#495057",
                              "text-anchor": anchor || "start"});
    label.textContent = content;
    return label;
  }

  function niceMax(value) {
    if (value <= 0) { return 1; }
    var step = Math.pow(10, Math.floor(Math.log10(value)));
    var candidates = [1, 2, 5, 10];
    for (var i = 0; i < candidates.length; i++) {
      if (candidates[i] * step >= value) { return candidates[i] * step; }
    }
    return 10 * step;
  }

  function clock(ms) {
    return new Date(ms).toTimeString().slice(0, 8);
  }

  function draw(chart, data) {
    var samples = data.samples || [];
    var svg = node("svg", {width: WIDTH, height: HEIGHT, viewBox: "0 0 " + WIDTH + " " + HEIGHT,
                           "data-points": samples.length});
    var legend = document.getElementById("lag-legend");
    var status = document.getElementById("lag-status");
    legend.textContent = "";
    var plotWidth = WIDTH - LEFT - RIGHT, plotHeight = HEIGHT - TOP - BOTTOM;
    svg.appendChild(node("rect", {x: LEFT, y: TOP, width: plotWidth, height: plotHeight,
                                  fill: "#fff", stroke: "#ced4da"}));
    if (samples.length === 0) {
      svg.appendChild(text(LEFT + plotWidth / 2, TOP + plotHeight / 2,
                           "no lag samples yet", "middle"));
    } else {
      var first = samples[0].t, last = samples[samples.length - 1].t;
      var span = Math.max(last - first, 1);
      var top = niceMax(Math.max.apply(null, samples.map(function (s) { return s.total; })));
      var x = function (t) { return LEFT + (samples.length === 1 ? plotWidth : (t - first) / span * plotWidth); };
      var y = function (lag) { return TOP + plotHeight - lag / top * plotHeight; };
      for (var g = 0; g <= 4; g++) {
        var level = top * g / 4, gy = y(level);
        svg.appendChild(node("line", {x1: LEFT, x2: LEFT + plotWidth, y1: gy, y2: gy,
                                      stroke: "#f1f3f5"}));
        svg.appendChild(text(LEFT - 6, gy + 4,
                             Number.isInteger(level) ? String(level) : level.toFixed(1), "end"));
      }
      svg.appendChild(text(LEFT, HEIGHT - 10, clock(first)));
      svg.appendChild(text(LEFT + plotWidth, HEIGHT - 10, clock(last), "end"));
      var names = [];
      samples.forEach(function (s) {
        Object.keys(s.partitions).forEach(function (name) {
          if (names.indexOf(name) < 0) { names.push(name); }
        });
      });
      names.sort();
      if (names.length > PALETTE.length) {
        var more = document.createElement("span");
        more.textContent = "(" + (names.length - PALETTE.length) + " more partitions counted in the total)";
        legend.appendChild(more);
      }
      names.slice(0, PALETTE.length).forEach(function (name, i) {
        var points = samples.filter(function (s) { return name in s.partitions; })
          .map(function (s) { return x(s.t) + "," + y(s.partitions[name]); });
        svg.appendChild(node("polyline", {points: points.join(" "), fill: "none",
                                          stroke: PALETTE[i], "stroke-width": 1.5,
                                          "class": "lag-partition"}));
        var item = document.createElement("span"), swatch = document.createElement("i");
        swatch.style.background = PALETTE[i];
        item.appendChild(swatch);
        item.appendChild(document.createTextNode(name));
        legend.insertBefore(item, more || null);
      });
      var total = samples.map(function (s) { return x(s.t) + "," + y(s.total); });
      svg.appendChild(node("polyline", {id: "lag-total", points: total.join(" "), fill: "none",
                                        stroke: TOTAL_COLOUR, "stroke-width": 3,
                                        "stroke-linejoin": "round"}));
      var item = document.createElement("span"), swatch = document.createElement("i");
      swatch.style.background = TOTAL_COLOUR;
      item.appendChild(swatch);
      item.appendChild(document.createTextNode("total"));
      legend.insertBefore(item, legend.firstChild);
    }
    chart.textContent = "";
    chart.appendChild(svg);
    var latest = samples.length ? samples[samples.length - 1] : null;
    status.textContent = samples.length + " sample(s)" +
      (latest ? ", total lag " + latest.total + " at " + clock(latest.t) : "") +
      (data.error ? "; the last sampling round failed: " + data.error : "");
  }

  function start(chart) {
    var url = chart.getAttribute("data-url");
    var interval = Math.max(250, Number(chart.getAttribute("data-interval-ms")) || 5000);
    function poll() {
      fetch(url, {headers: {Accept: "application/json"}, cache: "no-store"})
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.json();
        })
        .then(function (data) { draw(chart, data); })
        .catch(function (error) {
          document.getElementById("lag-status").textContent = "cannot load lag samples: " + error.message;
        })
        .then(function () { window.setTimeout(poll, interval); });
    }
    poll();
  }

  var chart = document.getElementById("lag-chart");
  if (chart) { start(chart); }
})();
"""
