import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

/**
 * Builds the web console into web/dist, which the platform serves under /console/. File names carry a content hash
 * so the platform can let browsers keep them for a year; the module-preload polyfill would be an inline script,
 * which the console's Content-Security-Policy refuses, so it is left out (every supported browser preloads modules).
 */
export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  base: "/console/",
  logLevel: "warn",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    modulePreload: { polyfill: false },
    // Data URLs would need a wider Content-Security-Policy; every asset stays a file of its own.
    assetsInlineLimit: 0,
    sourcemap: false,
  },
});
