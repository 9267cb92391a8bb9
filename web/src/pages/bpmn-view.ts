/**
 * A read-only BPMN diagram: the diagram interchange (BPMN DI) of the file drawn as SVG. The XML is read with the
 * browser's DOMParser (which never runs scripts or loads anything) and every shape is built with createElementNS and
 * text nodes, so names from the file cannot inject markup. A viewer library would bring its own runtime, inline
 * styles that the console's CSP refuses, and a license that requires its logo; drawing the DI ourselves needs
 * neither, at the cost of simpler symbols (task kinds are named in a caption rather than drawn as icons).
 */
import { h, uniqueId } from "../dom.js";

const modelNamespace = "http://www.omg.org/spec/BPMN/20100524/MODEL";
const diagramNamespace = "http://www.omg.org/spec/BPMN/20100524/DI";
const boundsNamespace = "http://www.omg.org/spec/DD/20100524/DC";
const waypointNamespace = "http://www.omg.org/spec/DD/20100524/DI";
const svgNamespace = "http://www.w3.org/2000/svg";

/** Most shapes and edges drawn; a larger diagram is drawn up to this many, with a note saying so. */
const maximumDrawnElements = 5_000;
/** Room around the diagram's outermost shapes. */
const marginPixels = 20;
/** Average width of one character of a 12-pixel label, used to wrap names inside their shapes. */
const characterWidthPixels = 6.5;
const lineHeightPixels = 14;

interface Bounds {
  x: number;
  y: number;
  width: number;
  height: number;
}

/** One element of the diagram as a table beside it lists it, for readers who cannot see the drawing. */
export interface DiagramElement {
  id: string;
  kind: string;
  name: string;
}

/** A drawn diagram, or why the file could not be drawn. */
export type BpmnRendering =
  | {
      kind: "diagram";
      svg: SVGSVGElement;
      elements: DiagramElement[];
      truncated: boolean;
      title: string;
      /** How many diagrams the file holds (collapsed sub-processes have their own); the first is drawn. */
      diagramCount: number;
    }
  | { kind: "unavailable"; reason: string };

function svg<Tag extends keyof SVGElementTagNameMap>(
  tag: Tag,
  attributes: Record<string, string | number>,
  ...children: (SVGElement | string)[]
): SVGElementTagNameMap[Tag] {
  const element = document.createElementNS(svgNamespace, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, String(value));
  for (const child of children) element.append(child);
  return element;
}

function numberAttribute(element: Element, name: string): number {
  const value = Number.parseFloat(element.getAttribute(name) ?? "");
  return Number.isFinite(value) ? value : 0;
}

function boundsOf(element: Element | null | undefined): Bounds | null {
  if (element === null || element === undefined) return null;
  return {
    x: numberAttribute(element, "x"),
    y: numberAttribute(element, "y"),
    width: Math.max(0, numberAttribute(element, "width")),
    height: Math.max(0, numberAttribute(element, "height")),
  };
}

/** The bounds directly inside `element` (a shape's own, not its label's). */
function ownBounds(element: Element): Bounds | null {
  for (const child of element.children) {
    if (child.namespaceURI === boundsNamespace && child.localName === "Bounds") return boundsOf(child);
  }
  return null;
}

/** The bounds of a shape's or edge's label, when the file places it. */
function labelBounds(element: Element): Bounds | null {
  for (const child of element.children) {
    if (child.namespaceURI === diagramNamespace && child.localName === "BPMNLabel") {
      return boundsOf(child.getElementsByTagNameNS(boundsNamespace, "Bounds")[0]);
    }
  }
  return null;
}

/** What a reader sees as the element's name: its name, or a text annotation's text. */
function nameOf(element: Element | undefined): string {
  if (element === undefined) return "";
  if (element.localName === "textAnnotation") {
    const text = element.getElementsByTagNameNS(modelNamespace, "text")[0];
    return (text?.textContent ?? "").trim();
  }
  return (element.getAttribute("name") ?? "").trim();
}

/** Splits `text` into lines of at most `widthPixels`, breaking between words (and inside words longer than a line). */
function wrap(text: string, widthPixels: number, maximumLines: number): string[] {
  const perLine = Math.max(4, Math.floor(widthPixels / characterWidthPixels));
  const lines: string[] = [];
  let line = "";
  for (let word of text.split(/\s+/).filter((part) => part !== "")) {
    while (word.length > perLine) {
      if (line !== "") lines.push(line);
      lines.push(word.slice(0, perLine));
      word = word.slice(perLine);
      line = "";
    }
    if (line === "") line = word;
    else if (line.length + 1 + word.length <= perLine) line = `${line} ${word}`;
    else {
      lines.push(line);
      line = word;
    }
  }
  if (line !== "") lines.push(line);
  if (lines.length > maximumLines) {
    const kept = lines.slice(0, maximumLines);
    kept[maximumLines - 1] = `${kept[maximumLines - 1]!.slice(0, Math.max(0, perLine - 1))}…`;
    return kept;
  }
  return lines;
}

/** Text centred on `centreX`, its lines starting at `topY`. */
function label(lines: readonly string[], centreX: number, topY: number, className = "label"): SVGTextElement {
  const text = svg("text", { class: className, x: centreX, y: topY, "text-anchor": "middle" });
  lines.forEach((line, index) => {
    text.append(svg("tspan", { x: centreX, dy: index === 0 ? 11 : lineHeightPixels }, line));
  });
  return text;
}

/** Human words for a BPMN element kind: `serviceTask` becomes "service task". */
export function kindName(localName: string): string {
  return localName.replace(/([a-z])([A-Z])/g, "$1 $2").toLowerCase();
}

const taskKinds = new Set([
  "task",
  "serviceTask",
  "userTask",
  "scriptTask",
  "sendTask",
  "receiveTask",
  "manualTask",
  "businessRuleTask",
  "callActivity",
  "subProcess",
  "transaction",
  "adHocSubProcess",
]);
const eventKinds = new Set([
  "startEvent",
  "endEvent",
  "intermediateCatchEvent",
  "intermediateThrowEvent",
  "boundaryEvent",
]);
const gatewayKinds = new Set([
  "exclusiveGateway",
  "parallelGateway",
  "inclusiveGateway",
  "eventBasedGateway",
  "complexGateway",
]);

/** The event definition's kind (`timer`, `message`, …) an event carries, or null for a plain event. */
function eventDefinition(element: Element): string | null {
  for (const child of element.children) {
    if (child.namespaceURI === modelNamespace && child.localName.endsWith("EventDefinition")) {
      return child.localName.slice(0, -"EventDefinition".length);
    }
  }
  return null;
}

/** What was drawn for one shape or edge, and the areas its labels took beyond its bounds. */
interface Drawn {
  group: SVGGElement;
  labelAreas: Bounds[];
}

/** Draws one shape; answers the group of SVG elements for it. */
function drawShape(shape: Element, element: Element | undefined, bounds: Bounds): Drawn {
  const kind = element?.localName ?? "unknown";
  const name = nameOf(element);
  const group = svg("g", { class: `shape ${kind}`, "data-element-id": element?.getAttribute("id") ?? "" });
  const { x, y, width, height } = bounds;
  const centreX = x + width / 2;
  const centreY = y + height / 2;
  const placedLabel = labelBounds(shape);
  const labelAreas: Bounds[] = [];
  const labelBelow = (): SVGTextElement => {
    const area = placedLabel ?? { x: centreX - 50, y: y + height + 5, width: 100, height: 3 * lineHeightPixels };
    labelAreas.push(area);
    return label(wrap(name, Math.max(area.width, 90), 3), area.x + area.width / 2, area.y);
  };
  if (taskKinds.has(kind)) {
    const expanded = shape.getAttribute("isExpanded") === "true";
    // An expanded sub-process is drawn with the containers, under the flows and shapes inside it.
    if (expanded) group.classList.add("expanded");
    group.append(svg("rect", { class: "outline", x, y, width, height, rx: 10, ry: 10 }));
    if (kind === "callActivity") {
      group.append(
        svg("rect", { class: "outline inner", x: x + 3, y: y + 3, width: width - 6, height: height - 6, rx: 8 }),
      );
    }
    if (expanded) {
      if (name !== "") group.append(label(wrap(name, width - 20, 2), x + 10 + (width - 20) / 2, y + 6));
    } else {
      const caption = kind === "task" ? null : kindName(kind);
      if (caption !== null) group.append(svg("text", { class: "caption", x: x + 6, y: y + 13 }, caption));
      const lines = wrap(name, width - 12, Math.max(1, Math.floor((height - 16) / lineHeightPixels)));
      group.append(label(lines, centreX, centreY - (lines.length * lineHeightPixels) / 2 + (caption === null ? 0 : 4)));
    }
  } else if (eventKinds.has(kind)) {
    const radius = Math.min(width, height) / 2;
    group.append(svg("circle", { class: "outline", cx: centreX, cy: centreY, r: radius }));
    if (kind.startsWith("intermediate") || kind === "boundaryEvent") {
      group.append(svg("circle", { class: "outline inner", cx: centreX, cy: centreY, r: Math.max(0, radius - 3) }));
    }
    const definition = eventDefinition(element!);
    if (definition !== null) {
      group.append(
        svg(
          "text",
          { class: "symbol", x: centreX, y: centreY + 4, "text-anchor": "middle" },
          definition.slice(0, 1).toUpperCase(),
        ),
      );
    }
    if (name !== "") group.append(labelBelow());
  } else if (gatewayKinds.has(kind)) {
    group.append(
      svg("polygon", {
        class: "outline",
        points: `${centreX},${y} ${x + width},${centreY} ${centreX},${y + height} ${x},${centreY}`,
      }),
    );
    const arm = Math.min(width, height) / 5;
    if (kind === "exclusiveGateway") {
      group.append(
        svg("path", {
          class: "symbol-line",
          d: `M${centreX - arm},${centreY - arm}L${centreX + arm},${centreY + arm}M${centreX + arm},${centreY - arm}L${centreX - arm},${centreY + arm}`,
        }),
      );
    } else if (kind === "parallelGateway" || kind === "complexGateway") {
      group.append(
        svg("path", {
          class: "symbol-line",
          d: `M${centreX},${centreY - arm * 1.3}V${centreY + arm * 1.3}M${centreX - arm * 1.3},${centreY}H${centreX + arm * 1.3}`,
        }),
      );
    } else {
      group.append(svg("circle", { class: "symbol-line", cx: centreX, cy: centreY, r: arm * 1.2 }));
    }
    if (name !== "") group.append(labelBelow());
  } else if (kind === "participant" || kind === "lane") {
    group.append(svg("rect", { class: "outline container", x, y, width, height }));
    const horizontal = shape.getAttribute("isHorizontal") !== "false";
    if (horizontal) {
      group.append(svg("line", { class: "outline", x1: x + 30, y1: y, x2: x + 30, y2: y + height }));
      // The name runs upwards along the band on the left, as modelling tools draw it.
      const lines = wrap(name, height - 10, 1);
      const text = label(lines, 0, 0);
      text.setAttribute("transform", `translate(${x + 9} ${centreY}) rotate(-90)`);
      group.append(text);
    } else if (name !== "") {
      group.append(label(wrap(name, width - 10, 1), centreX, y + 6));
    }
  } else if (kind === "textAnnotation") {
    group.append(svg("path", { class: "outline open", d: `M${x + 10},${y}H${x}V${y + height}H${x + 10}` }));
    const lines = wrap(name, width - 8, Math.max(1, Math.floor(height / lineHeightPixels)));
    const text = svg("text", { class: "label", x: x + 5, y: y + 2 });
    lines.forEach((line, index) => {
      text.append(svg("tspan", { x: x + 5, dy: index === 0 ? 11 : lineHeightPixels }, line));
    });
    group.append(text);
  } else if (kind === "group") {
    group.append(svg("rect", { class: "outline dashed", x, y, width, height, rx: 10 }));
    if (name !== "") group.append(label(wrap(name, width, 2), centreX, y + 4));
  } else if (kind === "dataStoreReference") {
    const rim = Math.min(8, height / 5);
    group.append(
      svg("path", {
        class: "outline",
        d: `M${x},${y + rim}A${width / 2},${rim} 0 0 1 ${x + width},${y + rim}V${y + height - rim}A${width / 2},${rim} 0 0 1 ${x},${y + height - rim}Z M${x},${y + rim}A${width / 2},${rim} 0 0 0 ${x + width},${y + rim}`,
      }),
    );
    if (name !== "") group.append(labelBelow());
  } else if (kind === "dataObjectReference" || kind === "dataInput" || kind === "dataOutput") {
    const fold = Math.min(10, width / 3);
    group.append(
      svg("path", {
        class: "outline",
        d: `M${x},${y}H${x + width - fold}L${x + width},${y + fold}V${y + height}H${x}Z`,
      }),
    );
    if (name !== "") group.append(labelBelow());
  } else {
    group.append(svg("rect", { class: "outline", x, y, width, height }));
    if (name !== "") group.append(label(wrap(name, width - 8, 3), centreX, y + 4));
  }
  return { group, labelAreas };
}

/** Draws one edge along its waypoints, with the arrowhead its kind carries. */
function drawEdge(
  edge: Element,
  element: Element | undefined,
  points: readonly { x: number; y: number }[],
  markers: ArrowMarkers,
): Drawn {
  const kind = element?.localName ?? "unknown";
  const group = svg("g", { class: `edge ${kind}`, "data-element-id": element?.getAttribute("id") ?? "" });
  const marker =
    kind === "sequenceFlow" || kind === "dataInputAssociation" || kind === "dataOutputAssociation"
      ? `url(#${markers.filledId})`
      : kind === "messageFlow"
        ? `url(#${markers.openId})`
        : null;
  const line = svg("polyline", {
    class: "connection",
    points: points.map((point) => `${point.x},${point.y}`).join(" "),
  });
  if (marker !== null) line.setAttribute("marker-end", marker);
  group.append(line);
  const name = nameOf(element);
  const labelAreas: Bounds[] = [];
  if (name !== "") {
    const placed = labelBounds(edge);
    if (placed !== null) {
      labelAreas.push(placed);
      group.append(label(wrap(name, Math.max(placed.width, 90), 2), placed.x + placed.width / 2, placed.y));
    } else {
      // Without a placed label, the name sits beside the middle of the middle segment, clear of the line.
      const index = Math.max(0, Math.floor((points.length - 1) / 2));
      const start = points[index] ?? { x: 0, y: 0 };
      const end = points[index + 1] ?? start;
      const middleX = (start.x + end.x) / 2 + 4;
      const lines = wrap(name, 90, 2);
      const top = (start.y + end.y) / 2 - 4 - lines.length * lineHeightPixels;
      const text = svg("text", { class: "label", x: middleX, y: top });
      lines.forEach((line, lineIndex) => {
        text.append(svg("tspan", { x: middleX, dy: lineIndex === 0 ? 11 : lineHeightPixels }, line));
      });
      group.append(text);
      labelAreas.push({ x: middleX, y: top, width: 90, height: lines.length * lineHeightPixels });
    }
  }
  return { group, labelAreas };
}

/** The arrowheads of one diagram, with ids unique in the document so two diagrams on a page keep their own. */
interface ArrowMarkers {
  filledId: string;
  openId: string;
  definitions: SVGDefsElement;
}

function arrowMarkers(): ArrowMarkers {
  const filledId = uniqueId("bpmn-arrow");
  const openId = uniqueId("bpmn-open-arrow");
  const definitions = svg(
    "defs",
    {},
    svg(
      "marker",
      {
        id: filledId,
        viewBox: "0 0 10 10",
        refX: 10,
        refY: 5,
        markerWidth: 8,
        markerHeight: 8,
        orient: "auto-start-reverse",
      },
      svg("path", { class: "arrowhead", d: "M0,0L10,5L0,10Z" }),
    ),
    svg(
      "marker",
      {
        id: openId,
        viewBox: "0 0 10 10",
        refX: 10,
        refY: 5,
        markerWidth: 8,
        markerHeight: 8,
        orient: "auto-start-reverse",
      },
      svg("path", { class: "arrowhead open", d: "M0,0L10,5L0,10Z" }),
    ),
  );
  return { filledId, openId, definitions };
}

/**
 * Draws the first diagram of a BPMN file. Answers why not when the XML does not parse or holds no diagram
 * interchange (a file written by a tool that does not lay out its processes).
 */
export function renderBpmn(xml: string): BpmnRendering {
  const parsed = new DOMParser().parseFromString(xml, "application/xml");
  if (parsed.getElementsByTagName("parsererror").length > 0) {
    return { kind: "unavailable", reason: "The file is not well-formed XML." };
  }
  const elements = new Map<string, Element>();
  for (const element of parsed.getElementsByTagNameNS(modelNamespace, "*")) {
    const id = element.getAttribute("id");
    if (id !== null) elements.set(id, element);
  }
  const planes = parsed.getElementsByTagNameNS(diagramNamespace, "BPMNPlane");
  const diagram = planes[0];
  if (diagram === undefined) {
    return { kind: "unavailable", reason: "The file holds no diagram layout (BPMN DI) to draw." };
  }
  const shapes: SVGGElement[] = [];
  const edges: SVGGElement[] = [];
  const listed: DiagramElement[] = [];
  let minimumX = Number.POSITIVE_INFINITY;
  let minimumY = Number.POSITIVE_INFINITY;
  let maximumX = Number.NEGATIVE_INFINITY;
  let maximumY = Number.NEGATIVE_INFINITY;
  const include = (x: number, y: number): void => {
    minimumX = Math.min(minimumX, x);
    minimumY = Math.min(minimumY, y);
    maximumX = Math.max(maximumX, x);
    maximumY = Math.max(maximumY, y);
  };
  const includeAreas = (areas: readonly Bounds[]): void => {
    for (const area of areas) {
      include(area.x, area.y);
      include(area.x + area.width, area.y + area.height);
    }
  };
  const markers = arrowMarkers();
  let drawn = 0;
  let truncated = false;
  for (const item of diagram.children) {
    if (item.namespaceURI !== diagramNamespace) continue;
    if (drawn >= maximumDrawnElements) {
      truncated = true;
      break;
    }
    const element = elements.get(item.getAttribute("bpmnElement") ?? "");
    if (item.localName === "BPMNShape") {
      const bounds = ownBounds(item);
      if (bounds === null) continue;
      include(bounds.x, bounds.y);
      include(bounds.x + bounds.width, bounds.y + bounds.height);
      const drawnShape = drawShape(item, element, bounds);
      includeAreas(drawnShape.labelAreas);
      shapes.push(drawnShape.group);
    } else if (item.localName === "BPMNEdge") {
      const points = [...item.getElementsByTagNameNS(waypointNamespace, "waypoint")].map((point) => ({
        x: numberAttribute(point, "x"),
        y: numberAttribute(point, "y"),
      }));
      if (points.length < 2) continue;
      for (const point of points) include(point.x, point.y);
      const drawnEdge = drawEdge(item, element, points, markers);
      includeAreas(drawnEdge.labelAreas);
      edges.push(drawnEdge.group);
    } else {
      continue;
    }
    drawn += 1;
    if (element !== undefined) {
      listed.push({ id: element.getAttribute("id") ?? "", kind: kindName(element.localName), name: nameOf(element) });
    }
  }
  if (drawn === 0) return { kind: "unavailable", reason: "The file's diagram layout places no shapes." };
  const processNames = [...elements.values()]
    .filter((element) => element.localName === "process" || element.localName === "collaboration")
    .map(nameOf)
    .filter((name) => name !== "");
  const title = processNames.length > 0 ? `Diagram of ${processNames.join(", ")}` : "Process diagram";
  const x = minimumX - marginPixels;
  const y = minimumY - marginPixels;
  const width = maximumX - minimumX + 2 * marginPixels;
  const height = maximumY - minimumY + 2 * marginPixels;
  const titleId = uniqueId("diagram-title");
  const drawing = svg(
    "svg",
    {
      class: "bpmn-diagram",
      role: "img",
      "aria-labelledby": titleId,
      viewBox: `${x} ${y} ${width} ${height}`,
      width,
      height,
    },
    svg("title", { id: titleId }, title),
    markers.definitions,
    // Containers (pools, lanes, groups, expanded sub-processes) first, then edges, then the other shapes, so that
    // a container never hides what lies on it.
    ...shapes.filter((shape) => /\b(participant|lane|group|expanded)\b/.test(shape.getAttribute("class") ?? "")),
    ...edges,
    ...shapes.filter((shape) => !/\b(participant|lane|group|expanded)\b/.test(shape.getAttribute("class") ?? "")),
  );
  return { kind: "diagram", svg: drawing, elements: listed, truncated, title, diagramCount: planes.length };
}

/** The diagram in a keyboard-scrollable region, with a fit-to-width switch and the list of its elements. */
export function bpmnView(xml: string): HTMLElement {
  const rendering = renderBpmn(xml);
  if (rendering.kind === "unavailable") {
    return h("p", { class: "note" }, `The diagram cannot be shown: ${rendering.reason}`);
  }
  const region = h("div", { class: "diagram-scroll", role: "region", "aria-label": rendering.title, tabindex: 0 });
  region.append(rendering.svg);
  const fit = h("button", { type: "button", "aria-pressed": "false" }, "Fit to width");
  fit.addEventListener("click", () => {
    const fitted = fit.getAttribute("aria-pressed") !== "true";
    fit.setAttribute("aria-pressed", String(fitted));
    rendering.svg.classList.toggle("fitted", fitted);
  });
  const named = rendering.elements.filter((element) => element.name !== "" || !element.kind.includes("flow"));
  return h(
    "div",
    { class: "bpmn-view" },
    h("div", { class: "actions" }, fit),
    region,
    rendering.truncated
      ? h("p", { class: "note" }, `Only the first ${maximumDrawnElements} shapes and connections are drawn.`)
      : null,
    rendering.diagramCount > 1
      ? h(
          "p",
          { class: "note" },
          `The file holds ${rendering.diagramCount} diagrams (collapsed sub-processes have their own); the main one is drawn.`,
        )
      : null,
    h(
      "details",
      {},
      h("summary", {}, `Elements of the diagram (${named.length})`),
      h(
        "ul",
        { class: "diagram-elements" },
        named.map((element) =>
          h("li", {}, element.kind, element.name === "" ? "" : `: ${element.name}`, " ", h("code", {}, element.id)),
        ),
      ),
    ),
  );
}
