import { mkdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import type { Page } from "playwright-core";
import { expect } from "vitest";

/** Where browser tests leave screenshots of their final state (git-ignored). */
export const artifactsDirectory = fileURLToPath(new URL("../../test-artifacts/", import.meta.url));

const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

/** The two widths the console must work at: a laptop and a phone. */
export const viewports = {
  wide: { width: 1280, height: 900 },
  narrow: { width: 390, height: 844 },
} as const;

/** A violation of the accessibility check, as much of it as a failure message needs. */
interface Violation {
  id: string;
  impact: string | null;
  help: string;
  targets: string[];
}

/**
 * Runs axe-core on the page as it is and fails on serious or critical violations. The script is evaluated through
 * the browser's debugging protocol, which the page's Content-Security-Policy does not govern.
 */
export async function expectAccessible(page: Page, label: string): Promise<void> {
  await page.evaluate(axeSource);
  const violations = await page.evaluate(async (): Promise<Violation[]> => {
    const axe = (
      globalThis as unknown as {
        axe: {
          run(): Promise<{
            violations: { id: string; impact: string | null; help: string; nodes: { target: unknown[] }[] }[];
          }>;
        };
      }
    ).axe;
    const result = await axe.run();
    return result.violations.map((violation) => ({
      id: violation.id,
      impact: violation.impact,
      help: violation.help,
      targets: violation.nodes.map((node) => String(node.target[0])),
    }));
  });
  const severe = violations.filter((violation) => violation.impact === "serious" || violation.impact === "critical");
  expect(severe, `accessibility of ${label}`).toEqual([]);
}

/** Saves a screenshot of the page under test-artifacts/, named after the test. */
export async function saveScreenshot(page: Page, name: string): Promise<void> {
  mkdirSync(artifactsDirectory, { recursive: true });
  await page.screenshot({ path: `${artifactsDirectory}${name}.png`, fullPage: true });
}

/** Collects the Content-Security-Policy violations a page reports, to assert there were none. */
export function collectPolicyViolations(page: Page): string[] {
  const violations: string[] = [];
  page.on("console", (message) => {
    if (message.text().includes("Content Security Policy")) violations.push(message.text());
  });
  return violations;
}

/** Signs in through the console's form and waits for the overview. */
export async function signIn(
  page: Page,
  baseUrl: string,
  client: { clientId: string; clientSecret: string },
  path = "/console/",
): Promise<void> {
  await page.goto(`${baseUrl}${path}`);
  await page.getByLabel("Client id").fill(client.clientId);
  await page.getByLabel("Client secret").fill(client.clientSecret);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("button", { name: "Sign out" }).waitFor();
}

// The helpers below run in the page; they are strings because the tests compile without the DOM's types.

/** How many pixels the page is wider than the viewport (0 or less: no sideways scrolling). */
export async function horizontalOverflow(page: Page): Promise<number> {
  return await page.evaluate<number>("document.documentElement.scrollWidth - window.innerWidth");
}

/** The text of the element that has the keyboard focus. */
export async function focusedText(page: Page): Promise<string> {
  return await page.evaluate<string>('document.activeElement?.textContent ?? ""');
}

/** Everything the page keeps in local storage, session storage and cookies. */
export async function browserStorage(page: Page): Promise<{ local: string; session: string; cookies: string }> {
  return await page.evaluate<{ local: string; session: string; cookies: string }>(
    "({ local: JSON.stringify({ ...localStorage }), session: JSON.stringify({ ...sessionStorage }), cookies: document.cookie })",
  );
}
