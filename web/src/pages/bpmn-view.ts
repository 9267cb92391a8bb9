/**
 * A read-only BPMN diagram, drawn by the reference viewer library (bpmn-js), which a page loads only when it shows
 * one. Around it: zoom and fit buttons, and the diagram's elements as a list, the text alternative to the drawing.
 */
import { h, replaceChildren } from "../dom.js";

/** Factor one press of a zoom button zooms by. */
const zoomStep = 1.25;

const modelNamespace = "http://www.omg.org/spec/BPMN/20100524/MODEL";
const diagramNamespace = "http://www.omg.org/spec/BPMN/20100524/DI";

/** What the page needs to know before loading the viewer: the diagram's name, or why there is nothing to draw. */
function inspect(xml: string): { title: string } | { unavailable: string } {
  const parsed = new DOMParser().parseFromString(xml, "application/xml");
  if (parsed.getElementsByTagName("parsererror").length > 0) return { unavailable: "the file is not well-formed XML." };
  if (parsed.getElementsByTagNameNS(diagramNamespace, "BPMNPlane").length === 0) {
    return { unavailable: "the file holds no diagram layout (BPMN DI) to draw." };
  }
  const names = [
    ...parsed.getElementsByTagNameNS(modelNamespace, "process"),
    ...parsed.getElementsByTagNameNS(modelNamespace, "collaboration"),
  ]
    .map((element) => (element.getAttribute("name") ?? "").trim())
    .filter((name) => name !== "");
  return { title: names.length > 0 ? `Diagram of ${names.join(", ")}` : "Process diagram" };
}

/** The diagram of a BPMN file; it appears when the viewer has loaded, or a note says why it cannot be shown. */
export function bpmnView(xml: string): HTMLElement {
  const inspected = inspect(xml);
  if ("unavailable" in inspected)
    return h("p", { class: "note" }, `The diagram cannot be shown: ${inspected.unavailable}`);
  const { title } = inspected;
  const canvas = h("div", { class: "bpmn-canvas" });
  const region = h("div", { class: "diagram-region", role: "region", "aria-label": title }, canvas);
  const zoomIn = h("button", { type: "button", disabled: true }, "Zoom in");
  const zoomOut = h("button", { type: "button", disabled: true }, "Zoom out");
  const fit = h("button", { type: "button", disabled: true }, "Fit diagram");
  const elements = h("div", {}, h("p", {}, "Loading the diagram…"));
  const view = h(
    "div",
    { class: "bpmn-view" },
    h("div", { class: "actions" }, zoomIn, zoomOut, fit),
    region,
    h(
      "p",
      { class: "hint" },
      "Drag the diagram to move it; with the diagram focused, Ctrl and the arrow keys move it too.",
    ),
    elements,
  );
  import("./bpmn-canvas.js")
    .then(async ({ drawDiagram }) => {
      const diagram = await drawDiagram(canvas, xml, title);
      zoomIn.addEventListener("click", () => diagram.zoomBy(zoomStep));
      zoomOut.addEventListener("click", () => diagram.zoomBy(1 / zoomStep));
      fit.addEventListener("click", () => diagram.fit());
      for (const button of [zoomIn, zoomOut, fit]) button.disabled = false;
      const listed = diagram.elements.filter((element) => element.name !== "" || !element.kind.endsWith("flow"));
      replaceChildren(
        elements,
        h(
          "details",
          {},
          h("summary", {}, `Elements of the diagram (${listed.length})`),
          h(
            "ul",
            { class: "diagram-elements" },
            listed.map((element) =>
              h("li", {}, element.kind, element.name === "" ? "" : `: ${element.name}`, " ", h("code", {}, element.id)),
            ),
          ),
        ),
      );
    })
    .catch((error: unknown) => {
      replaceChildren(
        view,
        h("p", { class: "note" }, `The diagram cannot be shown: ${(error as Error).message || "the viewer failed."}`),
      );
    });
  return view;
}
