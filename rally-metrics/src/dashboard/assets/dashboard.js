// The dashboard page: every second, the tables again from /fragment (rendered on the server)
// and the charts' series from /api/cluster, drawn with uPlot.
"use strict";
const palette = ["#1d3557", "#e63946", "#2a9d8f", "#e9c46a", "#6d597a", "#f4a261", "#457b9d", "#8ab17d"];
window.rallyCharts = {};
function chartData(view, series) {
  const c = view.charts;
  return [c.at, ...c[series].map(s => s.map(v => v === null ? null : v))];
}
function drawCharts(view) {
  for (const el of document.querySelectorAll(".chart")) {
    const series = el.dataset.series;
    const data = chartData(view, series);
    const names = view.charts.members.join("|");
    let chart = window.rallyCharts[el.id];
    if (chart && chart.rallyNames !== names) { chart.destroy(); chart = null; }
    if (!chart) {
      const opts = {
        title: el.dataset.title, width: 440, height: 190,
        series: [{}, ...view.charts.members.map((m, i) => ({
          label: m.replace(/^rally:\/\//, ""), stroke: palette[i % palette.length], width: 2, spanGaps: false,
        }))],
        axes: [{}, { size: 60 }],
      };
      chart = new uPlot(opts, data, el);
      chart.rallyNames = names;
      window.rallyCharts[el.id] = chart;
    } else {
      chart.setData(data);
    }
  }
}
async function refresh() {
  try {
    const [fragment, view] = await Promise.all([
      fetch("/fragment").then(r => r.text()),
      fetch("/api/cluster").then(r => r.json()),
    ]);
    document.getElementById("tables").innerHTML = fragment;
    drawCharts(view);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    document.getElementById("updated").textContent = "not updated: " + e;
  }
}
refresh();
setInterval(refresh, 1000);
