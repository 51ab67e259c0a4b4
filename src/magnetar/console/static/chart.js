// A small line chart in SVG: the last samples of a few series, the largest value labelled.

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  return node;
}

export function lineChart(series, { width = 600, height = 140, unit = "msg/s" } = {}) {
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img" });
  const top = Math.max(1, ...series.flatMap((line) => line.values));
  const length = Math.max(2, ...series.map((line) => line.values.length));
  const x = (i) => (i / (length - 1)) * width;
  const y = (value) => height - 4 - (value / top) * (height - 20);
  chart.append(svg("line", { x1: 0, y1: height - 4, x2: width, y2: height - 4, class: "axis" }));
  const label = svg("text", { x: 4, y: 12, class: "axis-label" });
  label.textContent = `${top.toFixed(1)} ${unit}`;
  chart.append(label);
  for (const line of series) {
    const points = line.values.map((value, i) => `${x(i).toFixed(1)},${y(value).toFixed(1)}`).join(" ");
    chart.append(svg("polyline", { points, class: `series ${line.cls}` }));
  }
  return chart;
}
