import { BpmnModdle } from "bpmn-moddle";
import { DmnModdle } from "dmn-moddle";
import { invalidRequest, ServiceError } from "../../http/errors.js";
import { MAX_LISTED_ISSUES } from "../../http/problem.js";

/** The kinds of file the Modeler stores. */
export const fileTypes = ["bpmn", "dmn", "form", "connector_template"] as const;

/** One kind of file. */
export type FileType = (typeof fileTypes)[number];

/** Largest file content accepted, in bytes of its UTF-8 encoding (10 MiB). */
export const maximumContentBytes = 10 * 1024 * 1024;

/**
 * Largest request body of the routes that carry file content. JSON escaping can double the size of text (every `"`
 * of an XML attribute becomes `\"`), so the body may be twice the content limit plus room for the other fields; the
 * content itself is then checked against `maximumContentBytes`.
 */
export const fileBodyLimitBytes = 2 * maximumContentBytes + 64 * 1024;

/** The XML root element each model type must have. */
const rootElementByType = { bpmn: "bpmn:Definitions", dmn: "dmn:Definitions" } as const;

/** How many parser warnings a 400 names at most; the rest are counted. */
const reportedWarningCount = 5;

/** The reader's message for content it cannot use: what (if anything), where (counted from 0) and why. */
const parserMessagePattern =
  /^unparsable content (?:(.*?) )?detected\s*\n\s*line: (\d+)\s*\n\s*column: (\d+)\s*\n\s*nested error: (.*)$/s;

/** Characters of the content a parser message quotes at most; the reader quotes a text node whole. */
const quotedContentMaxCharacters = 80;

/**
 * Turns a parser message into one line. The reader counts lines and columns from 0, where editors count from 1, so
 * a message of its own shape is reworded with the positions an editor shows; any other is only joined into one line.
 */
export function describeParserMessage(message: string): string {
  const match = parserMessagePattern.exec(message.trim());
  if (match === null) return oneLine(message);
  const [, content, line, column, cause] = match as unknown as [string, string | undefined, string, string, string];
  const position = `line ${Number(line) + 1}, column ${Number(column) + 1}: ${oneLine(cause)}`;
  if (content === undefined) return position;
  const quoted = oneLine(content);
  return quoted.length > quotedContentMaxCharacters
    ? `${position} (at ${quoted.slice(0, quotedContentMaxCharacters)}…)`
    : `${position} (at ${quoted})`;
}

function oneLine(message: string): string {
  return message.replace(/\s*\n\s*/g, "; ").trim();
}

const loneSurrogatePattern = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Checks that a text can be stored exactly: PostgreSQL text cannot hold U+0000, and a lone UTF-16 surrogate has no
 * UTF-8 encoding, so either would be altered or refused by the database rather than stored byte for byte.
 */
export function assertStorableText(field: string, value: string): void {
  if (value.includes("\u0000")) throw invalidRequest(`${field} must not contain the character U+0000.`);
  if (loneSurrogatePattern.test(value))
    throw invalidRequest(`${field} contains a lone UTF-16 surrogate, which is not text.`);
}

async function validateModel(type: "bpmn" | "dmn", content: string): Promise<void> {
  const rootElement = rootElementByType[type];
  const reader = type === "bpmn" ? BpmnModdle() : DmnModdle();
  const label = type.toUpperCase();
  let warnings: { message: string }[];
  try {
    const result = await reader.fromXML(content, rootElement);
    if (result.rootElement.$type !== rootElement) {
      throw invalidRequest(`content is not a ${label} document: its root element is ${result.rootElement.$type}.`);
    }
    warnings = result.warnings;
  } catch (error) {
    if (error instanceof ServiceError) throw error;
    throw invalidRequest(
      `content is not a valid ${label} document (root element ${rootElement} expected): ${describeParserMessage((error as Error).message)}.`,
    );
  }
  // The reader is lenient: unknown elements, duplicate ids and unresolved references only produce warnings. A
  // document with any of them would not round-trip through a modeler, so it is refused as invalid.
  if (warnings.length > 0) {
    const listed = warnings.slice(0, reportedWarningCount).map((warning) => describeParserMessage(warning.message));
    const more = warnings.length > reportedWarningCount ? ` (and ${warnings.length - reportedWarningCount} more)` : "";
    // The same bound as a validation's 400 (`MAX_LISTED_ISSUES`): a document of 700,000 unknown attributes was
    // answered with 47 MB listing each.
    const unlisted = warnings.length - MAX_LISTED_ISSUES;
    const errors = warnings
      .slice(0, MAX_LISTED_ISSUES)
      .map((warning) => ({ location: "body/content", message: describeParserMessage(warning.message) }));
    throw invalidRequest(
      `content is not a valid ${label} document: ${listed.join(" | ")}${more}.`,
      unlisted > 0 ? { errors, unlistedErrorCount: unlisted } : { errors },
    );
  }
}

function validateJsonObject(type: "form" | "connector_template", content: string): void {
  const label = type === "form" ? "form" : "connector template";
  let parsed: unknown;
  try {
    parsed = JSON.parse(content);
  } catch (error) {
    throw invalidRequest(`content of a ${label} must be a JSON object: ${(error as Error).message}.`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    const found = parsed === null ? "null" : Array.isArray(parsed) ? "an array" : `a ${typeof parsed}`;
    throw invalidRequest(`content of a ${label} must be a JSON object, not ${found}.`);
  }
}

/** Checks that content fits a file: at most `maximumContentBytes` of UTF-8 (413 beyond); answers its bytes. */
export function assertContentSize(content: string): number {
  const bytes = Buffer.byteLength(content, "utf8");
  if (bytes > maximumContentBytes) {
    throw new ServiceError(
      "payloadTooLarge",
      `content has ${bytes} bytes; a file holds at most ${maximumContentBytes} bytes (10 MiB) of UTF-8 text.`,
    );
  }
  return bytes;
}

/**
 * Validates file content for its type: at most `maximumContentBytes` (413 beyond), storable text, and BPMN/DMN
 * parsing to their `Definitions` root without warnings, or forms and connector templates being JSON objects (400).
 * Parsing takes time in proportion to the content, so services run this in the worker pool (`worker-tasks.ts`).
 */
export async function validateFileContent(type: FileType, content: string): Promise<void> {
  assertContentSize(content);
  assertStorableText("content", content);
  if (type === "bpmn" || type === "dmn") {
    await validateModel(type, content);
  } else {
    validateJsonObject(type, content);
  }
}
