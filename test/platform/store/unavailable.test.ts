import { pino } from "pino";
import { describe, expect, it } from "vitest";
import {
  DatabaseUnavailableError,
  databaseUnavailable,
  databaseUnavailableReason,
  logBackgroundFailure,
} from "../../../src/platform/store/unavailable.js";

describe("which driver errors say the database cannot serve now", () => {
  it("names a reason for locks, shutdowns, lost connections and timeouts, and none for anything else", () => {
    const coded = (code: string, message = "driver error") => Object.assign(new Error(message), { code });
    expect(databaseUnavailableReason(coded("SQLITE_BUSY"))).toMatch(/locked/);
    expect(databaseUnavailableReason(coded("SQLITE_BUSY_SNAPSHOT"))).toMatch(/locked/);
    expect(databaseUnavailableReason(coded("SQLITE_FULL"))).toMatch(/disk .* full/);
    expect(databaseUnavailableReason(coded("57P01"))).toMatch(/shutting down/);
    expect(databaseUnavailableReason(coded("08006"))).toMatch(/connection/);
    expect(databaseUnavailableReason(coded("53300"))).toMatch(/out of connections/);
    expect(databaseUnavailableReason(coded("57014"))).toMatch(/statement timeout/);
    expect(databaseUnavailableReason(coded("ECONNREFUSED"))).toMatch(/cannot be reached/);
    expect(databaseUnavailableReason(new Error("Connection terminated unexpectedly"))).not.toBeNull();
    expect(databaseUnavailableReason(new Error("Query read timeout"))).not.toBeNull();
    // A request's own mistakes and the platform's defects stay what they are.
    expect(databaseUnavailableReason(coded("SQLITE_CONSTRAINT_UNIQUE"))).toBeNull();
    expect(databaseUnavailableReason(coded("23505"))).toBeNull();
    expect(databaseUnavailableReason(coded("42P01"))).toBeNull();
    expect(databaseUnavailableReason(new TypeError("x is undefined"))).toBeNull();
    expect(databaseUnavailableReason("SQLITE_BUSY")).toBeNull();
  });

  it("turns only the store's classified errors into a 503 with Retry-After", () => {
    const lost = new DatabaseUnavailableError("the database cannot be reached", { cause: new Error("ECONNREFUSED") });
    expect(databaseUnavailable(lost)).toMatchObject({ status: 503, headers: { "retry-after": "5" } });
    // The same code from another dependency is not the database's.
    expect(databaseUnavailable(Object.assign(new Error("connect failed"), { code: "ECONNREFUSED" }))).toBeNull();
  });
});

describe("background work that meets a database that cannot serve", () => {
  it("logs one warning with the reason, and any other failure as an error with its stack", () => {
    const lines: { level: number; reason?: string; err?: { stack?: string } }[] = [];
    const logger = pino({ level: "info" }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const away = new DatabaseUnavailableError("the database cannot be reached", { cause: new Error("refused") });
    logBackgroundFailure(logger, away, { clusterId: "c" }, "could not poll a cluster's health");
    logBackgroundFailure(logger, new TypeError("a defect"), {}, "could not poll a cluster's health");
    expect(lines).toEqual([
      expect.objectContaining({ level: 40, reason: "the database cannot be reached", clusterId: "c" }),
      expect.objectContaining({
        level: 50,
        err: expect.objectContaining({ stack: expect.stringMatching(/a defect/) }),
      }),
    ]);
    expect(lines[0]).not.toHaveProperty("err");
  });
});
