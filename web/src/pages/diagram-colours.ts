/**
 * The colours a BPMN file gives its shapes, edges and labels (the `color` and `bioc` extensions of BPMN DI) reach the
 * drawing's paint as the file writes them. A value such as `url(https://…)` would have every reader's browser fetch an
 * address the file's author chose, telling that address who opened the file and when. The console's CSP refuses such
 * a load, and this module keeps the viewer from attempting it at all: before the diagram is drawn, every colour that
 * is not a plain colour is removed, so the viewer draws that element in its default colour.
 */

/** The DI properties the viewer reads colours from (bpmn-js `BpmnRenderUtil`), whatever prefix a file binds. */
const COLOUR_PROPERTIES = [
  "color:background-color",
  "color:border-color",
  "color:color",
  "bioc:fill",
  "bioc:stroke",
] as const;

/** A hexadecimal colour, a colour keyword, or an rgb/hsl function of numbers: nothing that can name a resource. */
const PLAIN_COLOUR = /^(?:#[0-9a-f]{3,8}|[a-z]{1,32}|(?:rgba?|hsla?)\([0-9.,%\s/+-]{1,64}\))$/i;

/** Whether `value` is a colour the viewer may paint with. */
export function isPlainColour(value: unknown): boolean {
  return typeof value === "string" && PLAIN_COLOUR.test(value.trim());
}

/** A model element as the viewer's model library gives it: properties are read and removed by qualified name. */
export interface ModelElement {
  get(name: string): unknown;
  set(name: string, value: unknown): void;
}

/** The part of a parsed BPMN file that holds its drawing. */
export interface DiagramDefinitions {
  readonly diagrams?: readonly { readonly plane?: DiagramPlane }[];
}

interface DiagramPlane extends ModelElement {
  readonly planeElement?: readonly (ModelElement & { readonly label?: ModelElement })[];
}

/** Removes every colour of `definitions`' drawing that is not a plain colour; returns how many it removed. */
export function removeUnsafeColours(definitions: DiagramDefinitions): number {
  let removed = 0;
  const clean = (element: ModelElement | undefined): void => {
    if (element === undefined) return;
    for (const property of COLOUR_PROPERTIES) {
      const value = element.get(property);
      if (value === undefined || isPlainColour(value)) continue;
      element.set(property, undefined);
      removed += 1;
    }
  };
  for (const diagram of definitions.diagrams ?? []) {
    clean(diagram.plane);
    for (const element of diagram.plane?.planeElement ?? []) {
      clean(element);
      clean(element.label);
    }
  }
  return removed;
}
