import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { defaultConsoleDirectory, loadConsoleFiles } from "../../../src/platform/console/files.js";
import { consoleContentSecurityPolicy } from "../../../src/platform/console/routes.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";

const browserAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

describe("web console serving", () => {
  let platform: TestPlatform;
  let assetPaths: string[];

  beforeAll(async () => {
    platform = await startTestPlatform();
    const index = await (await fetch(`${platform.url}/console/`)).text();
    assetPaths = [...index.matchAll(/(?:src|href)="(\/console\/assets\/[^"]+)"/g)].map((match) => match[1]!);
  });
  afterAll(async () => {
    await platform?.close();
  });

  it("answers browsers at / with the console's index page, never cached unchecked, under a strict CSP", async () => {
    const response = await fetch(`${platform.url}/`, { headers: { accept: browserAccept } });
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toMatch(/^text\/html/);
    expect(response.headers.get("cache-control")).toBe("no-cache");
    const policy = response.headers.get("content-security-policy") ?? "";
    expect(policy).toBe(consoleContentSecurityPolicy([]));
    expect(policy).toContain("script-src 'self'");
    expect(policy).not.toContain("unsafe-inline");
    expect(response.headers.get("x-frame-options")).toBe("DENY");
    const page = await response.text();
    expect(page).toContain('<div id="app">');
    // Every script of the page is a file of the platform's; an inline one would be refused by the policy.
    expect(page).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
  });

  it("keeps the JSON index for API clients at / and always at /api, with the audiences tokens need", async () => {
    for (const [path, accept] of [
      ["/", "*/*"],
      ["/", "application/json"],
      ["/api", browserAccept],
    ] as const) {
      const response = await fetch(`${platform.url}${path}`, { headers: { accept } });
      expect(response.status).toBe(200);
      expect(response.headers.get("content-type")).toMatch(/^application\/json/);
      const index = (await response.json()) as { name: string; apis: object; audiences: Record<string, string> };
      expect(index.name).toBe("flowplane");
      expect(index.audiences).toEqual({ admin: "admin-api", modeler: "modeler-api", gateway: "gateway-api" });
    }
  });

  it("answers the index page for the console's client-side routes", async () => {
    for (const path of ["/console", "/console/", "/console/members", "/console/clusters/abc/scaling"]) {
      const response = await fetch(`${platform.url}${path}`);
      expect(response.status, path).toBe(200);
      expect(await response.text(), path).toContain('<div id="app">');
      expect(response.headers.get("content-security-policy"), path).toBe(consoleContentSecurityPolicy([]));
    }
  });

  it("serves hashed assets for a year, revalidates them by etag, and answers unknown ones with a problem", async () => {
    expect(assetPaths.some((path) => path.endsWith(".js"))).toBe(true);
    expect(assetPaths.some((path) => path.endsWith(".css"))).toBe(true);
    // The page names an icon of its own, so that no browser asks for /favicon.ico (a 404 on every load).
    expect(assetPaths.some((path) => /\/favicon-[^/]+\.svg$/.test(path))).toBe(true);
    const contentTypes = { ".js": /^text\/javascript/, ".css": /^text\/css/, ".svg": /^image\/svg\+xml/ };
    for (const path of assetPaths) {
      const response = await fetch(`${platform.url}${path}`);
      expect(response.status).toBe(200);
      expect(response.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
      const extension = path.slice(path.lastIndexOf(".")) as keyof typeof contentTypes;
      expect(response.headers.get("content-type"), path).toMatch(contentTypes[extension]);
      const etag = response.headers.get("etag")!;
      const again = await fetch(`${platform.url}${path}`, { headers: { "if-none-match": etag } });
      expect(again.status).toBe(304);
    }
    for (const path of ["/console/assets/missing.js", "/console/assets/a/b.js"]) {
      const response = await fetch(`${platform.url}${path}`);
      expect(response.status, path).toBe(404);
      expect(response.headers.get("content-type")).toMatch(/^application\/problem\+json/);
    }
  });

  it("compares If-None-Match weakly and takes * as any representation, for the index page and assets alike", async () => {
    const assetPath = assetPaths.find((path) => path.endsWith(".js"))!;
    for (const path of ["/console/", assetPath]) {
      const etag = (await fetch(`${platform.url}${path}`)).headers.get("etag")!;
      expect(etag, path).toMatch(/^"[^"]+"$/);
      const answer = async (condition: string): Promise<number> =>
        (await fetch(`${platform.url}${path}`, { headers: { "if-none-match": condition } })).status;
      expect(await answer(etag), path).toBe(304);
      expect(await answer(`W/${etag}`), path).toBe(304);
      expect(await answer("*"), path).toBe(304);
      expect(await answer(`"other", ${etag}`), path).toBe(304);
      expect(await answer(`W/"other",W/${etag}`), path).toBe(304);
      expect(await answer('"other", W/"another"'), path).toBe(200);
      // A tag that only contains the current one, or names it without its quotes, is another tag.
      expect(await answer(`"x${etag.slice(1)}`), path).toBe(200);
      expect(await answer(etag.slice(1, -1)), path).toBe(200);
    }
  });

  it("refuses asset names that could leave the assets directory", async () => {
    for (const path of [
      "/console/assets/..%2Findex.html",
      "/console/assets/..%5Cindex.html",
      "/console/assets/.hidden",
    ]) {
      const response = await fetch(`${platform.url}${path}`);
      expect([400, 404], path).toContain(response.status);
      expect(await response.text(), path).not.toContain('<div id="app">');
    }
  });
});

describe("loading the console's files", () => {
  const directories: string[] = [];
  afterAll(() => {
    for (const directory of directories) rmSync(directory, { recursive: true, force: true });
  });

  it("finds the build of web/dist from the sources", () => {
    const files = loadConsoleFiles(defaultConsoleDirectory);
    expect(files).not.toBeNull();
    expect(files!.assets.size).toBeGreaterThan(0);
  });

  it("answers null without a build and loads only plain files of known types with URL-safe names", () => {
    const directory = mkdtempSync(join(tmpdir(), "flowplane-console-"));
    directories.push(directory);
    expect(loadConsoleFiles(directory)).toBeNull();
    writeFileSync(join(directory, "index.html"), "<!doctype html>");
    mkdirSync(join(directory, "assets"));
    writeFileSync(join(directory, "assets", "index-abc.js"), "export {};");
    writeFileSync(join(directory, "assets", "notes.exe"), "binary");
    writeFileSync(join(directory, "assets", "with space.js"), "export {};");
    mkdirSync(join(directory, "assets", "nested.js"));
    const files = loadConsoleFiles(directory)!;
    expect([...files.assets.keys()]).toEqual(["index-abc.js"]);
  });
});
