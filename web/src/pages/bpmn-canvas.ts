/**
 * The BPMN viewer library and its styles, in a module of their own: the pages load it only when they show a BPMN
 * diagram, so the rest of the console stays as small as it was. The library sets styles through the CSS object model
 * only, so it draws under the console's CSP (`style-src 'self'`, no inline styles). Two of its inputs would still ask
 * the browser for resources the CSP refuses: colours a file writes as `url(…)` (removed before drawing,
 * diagram-colours.ts), and the breadcrumbs' separator, a `data:` image (replaced in bpmn-canvas.css).
 */
import NavigatedViewer from "bpmn-js/lib/NavigatedViewer";
import "bpmn-js/dist/assets/diagram-js.css";
import "bpmn-js/dist/assets/bpmn-js.css";
import "./bpmn-canvas.css";
import { type DiagramDefinitions, removeUnsafeColours } from "./diagram-colours.js";

/** One element of the diagram as a reader of its text alternative sees it. */
export interface DiagramElement {
  id: string;
  kind: string;
  name: string;
}

/** A diagram drawn into its container, with what the page's controls need of it. */
export interface DrawnDiagram {
  /** The elements the diagram shows (labels are part of their element), in drawing order. */
  elements: DiagramElement[];
  /** Zooms by `factor` around the centre (above 1: closer). */
  zoomBy(factor: number): void;
  /** Fits the whole diagram into the visible area. */
  fit(): void;
}

interface Canvas {
  zoom(): number;
  zoom(level: number | "fit-viewport", center?: "auto" | { x: number; y: number }): number;
  viewbox(): { outer: { width: number; height: number } };
  getContainer(): HTMLElement;
}

interface RegisteredElement {
  id: string;
  type: string;
  labelTarget?: unknown;
  businessObject?: { name?: unknown; text?: unknown };
}

interface ElementRegistry {
  getAll(): RegisteredElement[];
}

/** Human words for an element type: `bpmn:ServiceTask` becomes "service task". */
function kindName(type: string): string {
  return type
    .replace(/^bpmn:/, "")
    .replace(/([a-z])([A-Z])/g, "$1 $2")
    .toLowerCase();
}

/**
 * Draws `xml` into `container` and fits it into view. Throws with the library's reason when the XML cannot be read
 * or holds no diagram layout (BPMN DI).
 */
export async function drawDiagram(container: HTMLElement, xml: string, label: string): Promise<DrawnDiagram> {
  const viewer = new NavigatedViewer({ container });
  viewer.on("import.parse.complete", (event: { definitions?: DiagramDefinitions }) => {
    if (event.definitions !== undefined) removeUnsafeColours(event.definitions);
  });
  await viewer.importXML(xml);
  const canvas = viewer.get<Canvas>("canvas");
  const registry = viewer.get<ElementRegistry>("elementRegistry");
  // The drawing takes the keyboard focus (arrow keys with Ctrl move it); it needs a name like any control. It is the
  // canvas's own SVG element: the first one in the container can be the icon of a collapsed sub-process's button.
  const drawing = canvas.getContainer().querySelector(":scope > svg");
  drawing?.setAttribute("aria-label", label);
  drawing?.setAttribute("role", "application");
  canvas.zoom("fit-viewport", "auto");
  const elements = registry
    .getAll()
    .filter(
      (element) =>
        element.type !== "label" &&
        element.labelTarget === undefined &&
        !/Process$|Collaboration$|Definitions$/.test(element.type),
    )
    .map((element) => {
      const name = element.businessObject?.name ?? element.businessObject?.text;
      return { id: element.id, kind: kindName(element.type), name: typeof name === "string" ? name.trim() : "" };
    });
  return {
    elements,
    zoomBy(factor) {
      canvas.zoom(canvas.zoom() * factor, "auto");
    },
    fit() {
      canvas.zoom("fit-viewport", "auto");
    },
  };
}
