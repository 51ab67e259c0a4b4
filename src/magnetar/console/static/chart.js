// Rates over time, drawn by uPlot (vendored: uplot-1.6.32.esm.js and .min.css, MIT, its
// licence in uplot-1.6.32.LICENSE beside them; the broker serves them as it serves these files).

import uPlot from "./uplot-1.6.32.esm.js";
import { el } from "./dom.js";

function color(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(`--${name}`).trim() || "gray";
}

/** A chart of `series` ({ label, values, cls }) at `times` (Unix seconds, one a refresh); the
 * node carries how many samples it draws (data-samples). Until there are two, a line says so. */
export function lineChart(times, series, { height = 160, unit = "msg/s" } = {}) {
  const length = times.length;
  const node = el("div", { class: "chart", "data-samples": String(length), role: "img",
    "aria-label": `${series.map((line) => line.label).join(" and ")}, ${unit}, the last ${length} samples` });
  if (length < 2) {
    node.append(el("p", { class: "legend" }, "(a sample every refresh: the chart starts with the second)"));
    return node;
  }
  const view = document.getElementById("view");
  const width = Math.max(240, Math.min(720, (view?.clientWidth ?? 720) - 4));
  const axis = { stroke: color("muted"), grid: { stroke: color("line") }, ticks: { stroke: color("line") } };
  new uPlot({
    width, height,
    legend: { show: false }, // the views name the series beside the chart (a legend table would be one more table)
    axes: [axis, { ...axis, label: unit }],
    series: [{}, ...series.map((line) => ({ label: line.label, stroke: color(line.cls), width: 2 }))],
  }, [times, ...series.map((line) => line.values)], node);
  return node;
}
