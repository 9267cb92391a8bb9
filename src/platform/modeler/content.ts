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

/**
 * The first control character (C0, DEL or C1) of `value`, or undefined. JSON writes most of them as six bytes
 * (`\u0001`), and no name needs one.
 */
function firstControlCharacter(value: string): number | undefined {
  for (let index = 0; index < value.length; index++) {
    const code = value.charCodeAt(index);
    if (code <= 0x1f || (code >= 0x7f && code <= 0x9f)) return code;
  }
  return undefined;
}

/**
 * Checks a name (of a project, folder, file or milestone) as `assertStorableText` does, and that it holds no control
 * character: a name is repeated in every path below it, so one written as six bytes a character multiplied what a
 * search of deep files answered (15.7 MB for a page of 50 at 100 levels of 255 such characters).
 */
export function assertName(field: string, value: string): void {
  assertStorableText(field, value);
  const control = firstControlCharacter(value);
  if (control !== undefined) {
    const codePoint = control.toString(16).toUpperCase().padStart(4, "0");
    throw invalidRequest(`${field} must not contain control characters; it holds U+${codePoint}.`);
  }
}

/**
 * Warnings a read collects before it stops: enough to list `MAX_LISTED_ISSUES` of them and to know that more follow.
 * The reader locates each warning by counting the document's lines from its start, so a document of tens of
 * thousands of problems (repeated ids, unknown elements, stray text) took minutes to read in full.
 */
const collectedWarningLimit = MAX_LISTED_ISSUES + 1;

/** Thrown into the reader to stop it once it has collected `collectedWarningLimit` warnings. */
class WarningLimitReached extends Error {
  constructor() {
    super(`the reader stopped after ${collectedWarningLimit} problems`);
    this.name = "WarningLimitReached";
  }
}

/** What reading a model found: its root element's type (none when it could not be read), and its warnings. */
interface ModelReading {
  readonly rootType: string | undefined;
  readonly warnings: readonly { message: string }[];
  /** Whether the read stopped at `collectedWarningLimit` warnings, so that more were not counted. */
  readonly stopped: boolean;
}

/**
 * Reads `content` with the library's lenient reader, stopping once it has collected `collectedWarningLimit`
 * warnings. The reader takes no such bound, so its root element's handler is given one: the reader hands that handler
 * the context it adds warnings to before it reads, and the bound throws from there, which ends the read.
 */
async function readModel(type: "bpmn" | "dmn", content: string): Promise<ModelReading> {
  const model = type === "bpmn" ? BpmnModdle() : DmnModdle();
  let stopped = false;
  const handler: ModdleReadOptions["handler"] = function (typeName) {
    const rootHandler = Object.getPrototypeOf(this).handler.call(this, typeName) as ModdleRootHandler;
    let context: ModdleReadContext | undefined;
    Object.defineProperty(rootHandler, "context", {
      get: () => context,
      set: (value: ModdleReadContext) => {
        context = value;
        const addWarning = value.addWarning;
        value.addWarning = function (warning) {
          addWarning.call(this, warning);
          if (this.warnings.length >= collectedWarningLimit) {
            stopped = true;
            throw new WarningLimitReached();
          }
        };
      },
    });
    return rootHandler;
  };
  try {
    const result = await model.fromXML(content, rootElementByType[type], { handler });
    return { rootType: result.rootElement.$type, warnings: result.warnings, stopped: false };
  } catch (error) {
    if (!(error instanceof WarningLimitReached)) throw error;
    const warnings = (error as WarningLimitReached & { warnings?: { message: string }[] }).warnings ?? [];
    // The bound must have been reached where the reader collects warnings; anything else is not this bound's stop.
    if (!stopped || warnings.length < collectedWarningLimit) {
      throw new Error(`invariant violated: the reader stopped with ${warnings.length} warnings`);
    }
    return { rootType: undefined, warnings, stopped: true };
  }
}

async function validateModel(type: "bpmn" | "dmn", content: string): Promise<void> {
  const rootElement = rootElementByType[type];
  const label = type.toUpperCase();
  let reading: ModelReading;
  try {
    reading = await readModel(type, content);
  } catch (error) {
    throw invalidRequest(
      `content is not a valid ${label} document (root element ${rootElement} expected): ${describeParserMessage((error as Error).message)}.`,
    );
  }
  const { rootType, warnings, stopped } = reading;
  if (!stopped && rootType !== rootElement) {
    throw invalidRequest(`content is not a ${label} document: its root element is ${rootType}.`);
  }
  // The reader is lenient: unknown elements, duplicate ids and unresolved references only produce warnings. A
  // document with any of them would not round-trip through a modeler, so it is refused as invalid.
  if (warnings.length > 0) {
    const listed = warnings.slice(0, reportedWarningCount).map((warning) => describeParserMessage(warning.message));
    const unreported = warnings.length - reportedWarningCount;
    const more = stopped
      ? ` (and more: reading stopped after ${collectedWarningLimit} problems)`
      : unreported > 0
        ? ` (and ${unreported} more)`
        : "";
    // The same bound as a validation's 400 (`MAX_LISTED_ISSUES`): a document of 700,000 unknown attributes was
    // answered with 47 MB listing each.
    const unlisted = warnings.length - MAX_LISTED_ISSUES;
    const errors = warnings
      .slice(0, MAX_LISTED_ISSUES)
      .map((warning) => ({ location: "body/content", message: describeParserMessage(warning.message) }));
    throw invalidRequest(
      `content is not a valid ${label} document: ${listed.join(" | ")}${more}.`,
      stopped
        ? { errors, uncountedErrors: true }
        : unlisted > 0
          ? { errors, unlistedErrorCount: unlisted }
          : { errors },
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
