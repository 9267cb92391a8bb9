/**
 * Minimal typings of the BPMN and DMN model libraries, which ship without declarations for their entry points:
 * only what content validation uses.
 */

/** What both libraries' `fromXML` resolve with. */
interface ModdleParseResult {
  rootElement: { $type: string };
  warnings: { message: string }[];
}

/** What a reader collects while it reads: the warnings so far, and how it adds one. */
interface ModdleReadContext {
  warnings: { message: string }[];
  addWarning(warning: { message: string }): void;
}

/** The handler of the document's root element, which the reader hands its context to before it reads. */
interface ModdleRootHandler {
  context: ModdleReadContext;
}

/** Options of `fromXML`, which the libraries set on the reader they create (so they can replace its methods). */
interface ModdleReadOptions {
  /** Creates the root element's handler; the reader's own is passed to the replacement as `this.handler`. */
  handler?: (this: { readonly model: unknown }, typeName: string) => ModdleRootHandler;
}

/** A model instance able to read XML into a typed element tree. */
interface ModdleReader {
  fromXML(xml: string, typeName?: string, options?: ModdleReadOptions): Promise<ModdleParseResult>;
}

declare module "bpmn-moddle" {
  /** Creates a BPMN 2.0 model with the standard packages (bpmn, bpmndi, dc, di). */
  export function BpmnModdle(additionalPackages?: Record<string, unknown>): ModdleReader;
}

declare module "dmn-moddle" {
  /** Creates a DMN 1.3 model with the standard packages (dmn, dmndi, dc, di). */
  export function DmnModdle(additionalPackages?: Record<string, unknown>): ModdleReader;
}
