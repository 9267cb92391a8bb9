/**
 * Minimal typings of the BPMN and DMN model libraries, which ship without declarations for their entry points:
 * only what content validation uses.
 */

/** What both libraries' `fromXML` resolve with. */
interface ModdleParseResult {
  rootElement: { $type: string };
  warnings: { message: string }[];
}

/** A model instance able to read XML into a typed element tree. */
interface ModdleReader {
  fromXML(xml: string, typeName?: string): Promise<ModdleParseResult>;
}

declare module "bpmn-moddle" {
  /** Creates a BPMN 2.0 model with the standard packages (bpmn, bpmndi, dc, di). */
  export function BpmnModdle(additionalPackages?: Record<string, unknown>): ModdleReader;
}

declare module "dmn-moddle" {
  /** Creates a DMN 1.3 model with the standard packages (dmn, dmndi, dc, di). */
  export function DmnModdle(additionalPackages?: Record<string, unknown>): ModdleReader;
}
