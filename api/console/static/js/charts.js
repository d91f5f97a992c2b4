// Charts through Chart.js (vendored, vendor/chartjs/VENDORED.md; a global `Chart` from its UMD file).
// A chart is made once and its data replaced on each refresh, so a live page does not flicker.

const money = (v) => `$${Number(v).toFixed(2)}`;

export function barChart(existing, canvas, labels, values, { horizontal = false } = {}) {
  if (existing && existing.canvas === canvas) {
    existing.data.labels = labels;
    existing.data.datasets[0].data = values;
    existing.update("none");
    return existing;
  }
  const valueAxis = { beginAtZero: true, ticks: { callback: money } };
  return new window.Chart(canvas, {
    type: "bar",
    data: { labels, datasets: [{ label: "USD", data: values, backgroundColor: "#2f5bea" }] },
    options: {
      indexAxis: horizontal ? "y" : "x", animation: false, maintainAspectRatio: false, responsive: true,
      plugins: { legend: { display: false }, tooltip: { callbacks: { label: (c) => money(c.raw) } } },
      scales: horizontal ? { x: valueAxis } : { y: valueAxis },
    },
  });
}

// GPU metrics over time: one line per GPU (utilisation %, or memory used %).
export function lineChart(existing, canvas, labels, series, { max = 100, unit = "%" } = {}) {
  const colours = ["#2f5bea", "#1a7f37", "#b26b00", "#c62828", "#6f42c1", "#0a7ea4", "#8a939c", "#d63384"];
  // A few samples are drawn as points (a line needs two); many as a line.
  const pointRadius = labels.length < 3 ? 3 : 0;
  const datasets = series.map((s, i) => ({ label: s.label, data: s.values, borderColor: colours[i % colours.length],
    backgroundColor: colours[i % colours.length], pointRadius, tension: 0.2 }));
  if (existing && existing.canvas === canvas) {
    existing.data.labels = labels;
    existing.data.datasets = datasets;
    existing.update("none");
    return existing;
  }
  return new window.Chart(canvas, {
    type: "line",
    data: { labels, datasets },
    options: {
      animation: false, maintainAspectRatio: false, responsive: true,
      scales: { y: { min: 0, max, ticks: { callback: (v) => `${v}${unit}` } } },
    },
  });
}
