import { ApiError, type Cluster } from "../api.js";
import { h, uniqueId } from "../dom.js";
import { repeatWhileShown } from "../ui.js";
import type { PageContext } from "./page.js";

/** How often the metrics are read while they are shown, and how many readings a chart keeps. */
const metricsPollMs = 2_000;
const keptSamples = 60;
/** Largest metrics text read; a cluster's is a few tens of kilobytes. */
const maxMetricsCharacters = 4 * 1024 * 1024;

const svgNamespace = "http://www.w3.org/2000/svg";

/** One sample of the Prometheus text format: a metric name, its labels and its value. */
interface MetricSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Reads the Prometheus text exposition format (the parts the console uses: names, labels, values). */
export function parsePrometheusText(text: string): MetricSample[] {
  const samples: MetricSample[] = [];
  for (const line of text.slice(0, maxMetricsCharacters).split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (match === null) continue;
    const labels: Record<string, string> = {};
    for (const label of (match[3] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[label[1]!] = label[2]!;
    }
    samples.push({ name: match[1]!, labels, value: Number(match[4]) });
  }
  return samples;
}

function total(samples: readonly MetricSample[], name: string): number {
  return samples.filter((sample) => sample.name === name).reduce((sum, sample) => sum + sample.value, 0);
}

/** Sum over partitions of the highest applied index any replica reports: the records the cluster has applied. */
function appliedRecords(samples: readonly MetricSample[]): number {
  const highest = new Map<string, number>();
  for (const sample of samples) {
    if (sample.name !== "flowplane_partition_applied_index") continue;
    const partition = sample.labels.partition ?? "";
    highest.set(partition, Math.max(highest.get(partition) ?? 0, sample.value));
  }
  return [...highest.values()].reduce((sum, value) => sum + value, 0);
}

/** One chart: a named series of readings. */
interface Series {
  label: string;
  unit: string;
  values: number[];
}

function format(value: number): string {
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}

/** A small line chart as SVG (drawn with attributes, never inline styles, which the CSP refuses). */
function chart(series: Series): HTMLElement {
  const width = 240;
  const height = 60;
  const captionId = uniqueId("chart");
  const latest = series.values.at(-1);
  const summary =
    latest === undefined
      ? `${series.label}: no reading yet`
      : `${series.label}: ${format(latest)}${series.unit === "" ? "" : ` ${series.unit}`}`;
  const svg = document.createElementNS(svgNamespace, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-labelledby", captionId);
  svg.setAttribute("class", "sparkline");
  const highest = Math.max(1, ...series.values);
  const step = width / Math.max(1, keptSamples - 1);
  const offset = (keptSamples - series.values.length) * step;
  const points = series.values
    .map(
      (value, index) =>
        `${(offset + index * step).toFixed(1)},${(height - 2 - (value / highest) * (height - 4)).toFixed(1)}`,
    )
    .join(" ");
  const baseline = document.createElementNS(svgNamespace, "line");
  for (const [name, value] of Object.entries({
    x1: "0",
    y1: String(height - 1),
    x2: String(width),
    y2: String(height - 1),
  })) {
    baseline.setAttribute(name, value);
  }
  baseline.setAttribute("class", "baseline");
  svg.append(baseline);
  if (series.values.length > 1) {
    const line = document.createElementNS(svgNamespace, "polyline");
    line.setAttribute("points", points);
    line.setAttribute("class", "series");
    svg.append(line);
  }
  return h("figure", { class: "metric" }, h("figcaption", { id: captionId }, summary), svg);
}

/**
 * Key metrics of a cluster from its Prometheus endpoint, as small charts of the last two minutes: REST requests per
 * second and in flight, records applied per second, brokers reachable.
 */
export function metricsPanel(context: PageContext, cluster: Cluster): HTMLElement {
  const headingId = uniqueId("metrics-title");
  const note = h("p", { class: "muted" });
  const charts = h("div", { class: "charts" });
  const panel = h("section", { "aria-labelledby": headingId }, h("h2", { id: headingId }, "Metrics"), note, charts);
  const requestRate: Series = { label: "REST requests per second", unit: "/s", values: [] };
  const inFlight: Series = { label: "REST requests in flight", unit: "", values: [] };
  const applyRate: Series = { label: "Records applied per second", unit: "/s", values: [] };
  const reachable: Series = { label: "Brokers reachable", unit: "", values: [] };
  let previous: { atMs: number; requests: number; applied: number } | null = null;
  const push = (series: Series, value: number): void => {
    series.values.push(Math.max(0, value));
    if (series.values.length > keptSamples) series.values.shift();
  };
  repeatWhileShown(panel, metricsPollMs, async () => {
    try {
      const samples = parsePrometheusText(await context.api.metricsText(cluster.links.management));
      const now = {
        atMs: Date.now(),
        requests: total(samples, "flowplane_gateway_requests_total"),
        applied: appliedRecords(samples),
      };
      if (previous !== null && now.atMs > previous.atMs) {
        const seconds = (now.atMs - previous.atMs) / 1000;
        push(requestRate, (now.requests - previous.requests) / seconds);
        push(applyRate, (now.applied - previous.applied) / seconds);
      }
      previous = now;
      push(inFlight, total(samples, "flowplane_gateway_in_flight_requests"));
      push(reachable, total(samples, "flowplane_gateway_brokers_reachable"));
      note.textContent = "The last two minutes, read from the cluster's Prometheus endpoint every two seconds.";
      charts.replaceChildren(chart(requestRate), chart(inFlight), chart(applyRate), chart(reachable));
    } catch (error) {
      note.textContent =
        error instanceof ApiError && error.status === 401
          ? "The cluster's metrics need a monitoring client's credentials while its monitoring is on; the console does not show them."
          : `The metrics could not be read: ${(error as Error).message}`;
    }
  });
  return panel;
}
