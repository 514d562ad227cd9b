/* The usage page's charts: uPlot over the series the server embedded in the page.
 *
 * The server renders the numbers (a <script type="application/json"> block, so no inline script runs and
 * nothing here fetches); this file only draws them. Each chart is as wide as its box and redrawn when the
 * box changes size, so the page works from a 375 px phone to a wide screen. When every chart is drawn the
 * container gets data-drawn="true" (the browser tests wait for it).
 */
(function () {
  "use strict";

  var COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#65a30d", "#6b7280"];

  function formatter(unit) {
    if (unit === "usd") {
      return function (v) {
        if (v == null) return "";
        if (v === 0) return "$0";
        if (Math.abs(v) >= 0.01) return "$" + v.toFixed(2);
        return "$" + parseFloat(v.toPrecision(2)).toFixed(Math.min(8, 1 - Math.floor(Math.log10(Math.abs(v)))));
      };
    }
    if (unit === "ms") {
      return function (v) { return v == null ? "" : Math.round(v) + " ms"; };
    }
    return function (v) {
      if (v == null) return "";
      if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
      if (Math.abs(v) >= 1e3) return (v / 1e3).toFixed(1) + "k";
      return String(Math.round(v * 100) / 100);
    };
  }

  // dollars on an axis share one number of decimals, enough to tell its ticks apart ($0.000002, $0.000004)
  function tickLabels(unit, fmt) {
    if (unit !== "usd") return function (u, ticks) { return ticks.map(fmt); };
    return function (u, ticks, axis, space, incr) {
      var decimals = Math.min(8, Math.max(2, Math.ceil(-Math.log10(incr || 1))));
      return ticks.map(function (v) { return v === 0 ? "$0" : "$" + v.toFixed(decimals); });
    };
  }

  // the y axis is as wide as its longest label (a cost of $0.000008 needs more room than a count of 5)
  function axisSize(u, values) {
    if (!values) return 40;
    var longest = values.reduce(function (n, v) { return Math.max(n, String(v).length); }, 0);
    return Math.max(40, longest * 7 + 18);
  }

  function heightFor(width) {
    return width < 500 ? 180 : 240;
  }

  function draw(box, x, chart) {
    var fmt = formatter(chart.unit);
    var series = [{ label: "time (UTC)" }];
    var data = [x];
    chart.series.forEach(function (s, i) {
      series.push({
        label: s.label,
        stroke: COLOURS[i % COLOURS.length],
        width: 2,
        // a lone bucket between empty ones is a dot, not an invisible line (latency has gaps, not zeros)
        points: { show: chart.unit === "ms" || x.length < 3, size: 5 },
        spanGaps: false,
        value: function (u, v) { return fmt(v); },
      });
      data.push(s.values);
    });
    var width = Math.max(box.clientWidth, 240);
    var opts = {
      title: chart.title,
      width: width,
      height: heightFor(width),
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
      series: series,
      scales: { y: { range: function (u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; } } },
      axes: [{}, { values: tickLabels(chart.unit, fmt), size: axisSize }],
      legend: { live: width >= 500 },
    };
    return new uPlot(opts, data, box);
  }

  function start() {
    var container = document.querySelector("[data-testid=usage-chart]");
    if (!container || typeof uPlot === "undefined") return;
    var source = document.getElementById(container.getAttribute("data-source"));
    if (!source) return;
    var payload = JSON.parse(source.textContent);
    var plots = [];
    payload.charts.forEach(function (chart) {
      var box = document.createElement("div");
      box.className = "chart";
      box.setAttribute("data-chart", chart.key);
      container.appendChild(box);
      plots.push({ box: box, plot: draw(box, payload.x, chart) });
    });
    var pending = null;
    window.addEventListener("resize", function () {
      if (pending) window.clearTimeout(pending);
      pending = window.setTimeout(function () {
        plots.forEach(function (p) {
          var width = Math.max(p.box.clientWidth, 240);
          p.plot.setSize({ width: width, height: heightFor(width) });
        });
      }, 100);
    });
    container.setAttribute("data-drawn", "true");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
