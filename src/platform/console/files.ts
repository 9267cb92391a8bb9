import { createHash } from "node:crypto";
import { existsSync, lstatSync, readdirSync, readFileSync } from "node:fs";
import { extname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** Where `npm run build` puts the web console (web/dist), found from this module in src/ and in dist/ alike. */
export const defaultConsoleDirectory = fileURLToPath(new URL("../../../web/dist/", import.meta.url));

/** One file of the built console, held in memory. */
export interface ConsoleFile {
  body: Buffer;
  contentType: string;
  /** Strong validator of the content. */
  etag: string;
}

/** The built console: its index page and its hashed assets by file name. */
export interface ConsoleFiles {
  index: ConsoleFile;
  assets: ReadonlyMap<string, ConsoleFile>;
}

/** Most assets and bytes the platform loads: a console build is far smaller, so more means a wrong directory. */
const maxAssetFiles = 500;
const maxTotalBytes = 32 * 1024 * 1024;

const contentTypes: Record<string, string> = {
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".woff2": "font/woff2",
  ".json": "application/json; charset=utf-8",
  ".txt": "text/plain; charset=utf-8",
};

/** The names assets may have: one path segment of letters, digits, `-`, `_` and dots, never `.` or `..`. */
export const assetNamePattern = "^[A-Za-z0-9_-][A-Za-z0-9_.-]*$";
const assetName = new RegExp(assetNamePattern);

function consoleFile(body: Buffer, contentType: string): ConsoleFile {
  return { body, contentType, etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 27)}"` };
}

/**
 * Loads the built console from `directory` (index.html and the files of assets/) into memory, so requests never
 * touch the file system. Answers null when there is no build there.
 */
export function loadConsoleFiles(directory: string): ConsoleFiles | null {
  const indexPath = join(directory, "index.html");
  if (!existsSync(indexPath)) return null;
  const index = consoleFile(readFileSync(indexPath), "text/html; charset=utf-8");
  const assets = new Map<string, ConsoleFile>();
  const assetDirectory = join(directory, "assets");
  let totalBytes = index.body.length;
  if (existsSync(assetDirectory)) {
    for (const name of readdirSync(assetDirectory)) {
      const path = join(assetDirectory, name);
      const contentType = contentTypes[extname(name)];
      // Only plain files of known types with names a URL can carry are served; anything else stays on disk.
      if (contentType === undefined || !assetName.test(name) || !lstatSync(path).isFile()) continue;
      if (assets.size >= maxAssetFiles) throw new Error(`${assetDirectory} holds more than ${maxAssetFiles} files`);
      const body = readFileSync(path);
      totalBytes += body.length;
      if (totalBytes > maxTotalBytes) throw new Error(`${directory} holds more than ${maxTotalBytes} bytes`);
      assets.set(name, consoleFile(body, contentType));
    }
  }
  return { index, assets };
}
