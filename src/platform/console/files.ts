import { createHash } from "node:crypto";
import { existsSync, lstatSync, readdirSync, readFileSync, type Stats } from "node:fs";
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

/** The file system entry at `path` itself (a symlink is not followed), or null when there is none. */
function entryAt(path: string): Stats | null {
  try {
    return lstatSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw error;
  }
}

/**
 * Loads the built console from `directory` (index.html and the files of assets/) into memory, so requests never
 * touch the file system. Answers null when there is no build there. Only plain files are read (never through a
 * symlink), and each one's size is counted against the total before it is read, so a wrong directory holding a
 * huge file is refused without reading it.
 */
export function loadConsoleFiles(directory: string): ConsoleFiles | null {
  const indexPath = join(directory, "index.html");
  const indexEntry = entryAt(indexPath);
  if (indexEntry === null) return null;
  if (!indexEntry.isFile()) {
    throw new Error(`${indexPath} is a symlink or not a plain file: the console is loaded from plain files only`);
  }
  let totalBytes = 0;
  const read = (path: string, size: number): Buffer => {
    if (totalBytes + size > maxTotalBytes) throw new Error(`${directory} holds more than ${maxTotalBytes} bytes`);
    const body = readFileSync(path);
    // The file may have grown since its lstat; what was read is what counts.
    totalBytes += body.length;
    if (totalBytes > maxTotalBytes) throw new Error(`${directory} holds more than ${maxTotalBytes} bytes`);
    return body;
  };
  const index = consoleFile(read(indexPath, indexEntry.size), "text/html; charset=utf-8");
  const assets = new Map<string, ConsoleFile>();
  const assetDirectory = join(directory, "assets");
  if (existsSync(assetDirectory)) {
    for (const name of readdirSync(assetDirectory)) {
      const path = join(assetDirectory, name);
      const contentType = contentTypes[extname(name)];
      if (contentType === undefined || !assetName.test(name)) continue;
      // Only plain files of known types with names a URL can carry are served; anything else stays on disk.
      const entry = lstatSync(path);
      if (!entry.isFile()) continue;
      if (assets.size >= maxAssetFiles) throw new Error(`${assetDirectory} holds more than ${maxAssetFiles} files`);
      assets.set(name, consoleFile(read(path, entry.size), contentType));
    }
  }
  return { index, assets };
}
